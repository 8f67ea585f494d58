// Placeholder (issue 46): being written.
