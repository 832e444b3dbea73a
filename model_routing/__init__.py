"""The model router for ``model: "auto"``: per-tier policies that pick a small or a large deployment per prompt."""
