"""Reading finished runs: results tables, figures, token counts, verdicts (no model)."""
