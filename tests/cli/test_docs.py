"""``jaxmodel docs``: writes the generated pages, and ``--check`` fails on a stale one."""

from typer.testing import CliRunner

from jaxmodel.cli import app


def test_docs_writes_the_pages_and_check_finds_them_fresh(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["docs", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cli.md", "models.md", "physics.md", "presets.md"]
    assert "## `jaxmodel docs`" in (tmp_path / "cli.md").read_text()
    result = runner.invoke(app, ["docs", str(tmp_path), "--check"])
    assert result.exit_code == 0 and "fresh" in result.output


def test_check_names_a_stale_or_missing_page_and_writes_nothing(tmp_path):
    runner = CliRunner()
    runner.invoke(app, ["docs", str(tmp_path)])
    (tmp_path / "presets.md").write_text("old\n")
    (tmp_path / "cli.md").unlink()
    result = runner.invoke(app, ["docs", str(tmp_path), "--check"])
    assert result.exit_code == 1
    assert "stale" in result.output and "presets.md, cli.md" in result.output
    assert (tmp_path / "presets.md").read_text() == "old\n"
    assert not (tmp_path / "cli.md").exists()
