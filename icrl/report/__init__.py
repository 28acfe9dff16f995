"""The study report: one self-contained HTML page for every run of a data folder or a sweep."""
