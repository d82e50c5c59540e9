"""The reporting layer: reads saved records and run.json files, never runs a kernel. Imports go
one way: `aggregate` (repeated runs' statistics) and `markup` (HTML) → `read` (a report folder)
→ `findings` (headlines, correctness, flags as text and tables) → `panels` (figures) → `pages`
(a report folder's index.html and SUMMARY.md) → `gallery` (outputs/index.html)."""
