"""Context strategies: which past episodes go into the prompt."""
