"""``jaxmodel sweep SPEC.toml``: run a sweep specification into a Parquet dataset."""

import shlex
from pathlib import Path
from typing import Annotated

import typer

from jaxmodel.cli.common import X64Option, parse_shard, reports_errors
from jaxmodel.documents import dry_run_summary, plural, sweep_summary
from jaxmodel.errors import SpecError
from jaxmodel.spec import DEFAULT_CHUNK, check_writers, load_spec


def _processes(distributed: bool, coordinator: str | None, num_processes: int | None,
               process_id: int | None, shard: str | None) -> tuple[int, int]:
    """(this process, process count) from --shard or jax.distributed."""
    if shard is not None:
        if distributed or coordinator:
            raise SpecError("--shard: use either --shard or --distributed/--coordinator")
        return parse_shard(shard)
    if distributed or coordinator:
        import jax

        kwargs = {}
        if coordinator:
            if num_processes is None or process_id is None:
                raise SpecError("--coordinator: give --num-processes and --process-id too")
            kwargs = dict(coordinator_address=coordinator, num_processes=num_processes,
                          process_id=process_id)
        try:
            jax.distributed.initialize(**kwargs)
        except Exception as e:  # the runtime's own message, on one line
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise SpecError(f"--distributed: could not start jax.distributed ({first})") from None
        return jax.process_index(), jax.process_count()
    return 0, 1


@reports_errors
def sweep_command(
    spec_path: Annotated[Path, typer.Argument(metavar="SPEC.toml", help="sweep specification")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="dataset directory (default: the spec's output.path, "
        "else out/<spec name>)")] = None,
    chunk_size: Annotated[int | None, typer.Option(
        "--chunk-size", help=f"configurations per device chunk (default: {DEFAULT_CHUNK:,}; "
        "with --resume, the dataset's own)", min=1)] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="finish an interrupted sweep in the same directory")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="replace an existing dataset")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="print the size, expected rows, bytes and time; write nothing")] = False,
    x64: X64Option = False,
    writers: Annotated[int | None, typer.Option(
        "--writers", help="threads writing Parquet parts at once (default: the cores "
        "not busy feeding the device); the dataset is the same for any number")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress, no summary")] = False,
    distributed: Annotated[bool, typer.Option(
        "--distributed", help="initialise jax.distributed from the environment "
        "(Slurm, ...) and split the chunks over its processes")] = False,
    coordinator: Annotated[str | None, typer.Option(
        "--coordinator", help="HOST:PORT of process 0 (explicit jax.distributed)")] = None,
    num_processes: Annotated[int | None, typer.Option(
        "--num-processes", min=1, help="processes in the run (with --coordinator)")] = None,
    process_id: Annotated[int | None, typer.Option(
        "--process-id", min=0, help="this process, 0 to N-1 (with --coordinator)")] = None,
    shard: Annotated[str | None, typer.Option(
        "--shard", metavar="I/N", help="take share I of N without a coordinator "
        "(job arrays)")] = None,
) -> None:
    """Run a sweep specification (TOML) into a Parquet dataset."""
    if resume and overwrite:
        raise SpecError("--resume: use either --resume or --overwrite, not both")
    check_writers(writers)
    spec = load_spec(spec_path)
    # jax is imported only now, once the spec has been checked (issue 26).
    from jaxmodel.engine import SweepInterrupted, WriteFailed, run_sweep
    from jaxmodel.sweeping import build_plan, chunk_size_for, estimate, output_directory

    # jax.distributed must start before anything touches a device.
    process, processes = (0, 1) if dry_run else _processes(
        distributed, coordinator, num_processes, process_id, shard)
    directory = output_directory(spec, output)
    plan = build_plan(spec, x64=x64, chunk_size=chunk_size_for(directory, chunk_size, resume))
    if dry_run:
        typer.echo(dry_run_summary(plan, estimate(plan, writers), directory))
        return

    def resume_command() -> str:
        again = [str(spec_path), "-o", str(directory), "--resume"]
        if plan.chunk_size != DEFAULT_CHUNK and plan.chunk_size != plan.size:
            again += ["--chunk-size", str(plan.chunk_size)]
        again += ["--x64"] * x64 + (["--shard", shard] if shard else [])
        again += ["--writers", str(writers)] if writers else []
        again += ["--distributed"] * distributed
        if coordinator:
            again += ["--coordinator", coordinator, "--num-processes", str(num_processes),
                      "--process-id", str(process_id)]
        return f"jaxmodel sweep {shlex.join(again)}"

    try:
        result = run_sweep(plan, directory, resume=resume, overwrite=overwrite,
                           process=process, processes=processes, quiet=quiet, writers=writers)
    except SweepInterrupted as e:
        r = e.args[0]
        typer.echo(f"interrupted after {plural(r.chunks, 'chunk')} ({plural(r.rows, 'row')} "
                   "written); resume "
                   f"with: {resume_command()}", err=True)
        raise typer.Exit(130) from None
    except WriteFailed as e:
        typer.echo(f"error: {e}; once fixed, resume with: {resume_command()}", err=True)
        raise typer.Exit(1) from None
    lost = result.extra.get("lost_parts")
    if lost:
        typer.echo(f"warning: {len(lost)} recorded part(s) were missing or changed since they "
                   f"were written ({', '.join(lost[:5])}{', ...' * (len(lost) > 5)}); their "
                   "chunks were written again", err=True)
    if not quiet:
        typer.echo(sweep_summary(plan, result, directory, process=process,
                                 processes=processes))
