"""A self-contained HTML episode viewer for runs' records (``python run_view.py DATA_DIR``)."""
