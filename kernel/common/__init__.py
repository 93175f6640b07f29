"""What every part of the kernel speaks: errors, ids, text, statuses, versions, content
references and per-key concurrency limits. Imports nothing else of the kernel."""
