"""The batch check: request parsing, the line-by-line check, token counts."""
