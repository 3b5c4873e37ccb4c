"""A dashboard over sweep datasets: DuckDB queries, Plotly figures, a Dash app, a report.

Needs the dashboard extra (``pip install 'jaxmodel[dashboard]'``: Dash, Plotly,
DuckDB).  Modules: ``data`` (safe server-side queries), ``config`` (one
configuration through the jax model), ``figures`` (Plotly), ``app`` (the live
app), ``report`` (the offline HTML file), ``serve`` (the web server).
"""
