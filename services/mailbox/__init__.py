"""A small, real, idempotent mail service for the five-notices scenario.

It accepts a send once per idempotency key (the caller's stable operation id), answers retries
of that key from its own durable store, and can say definitely whether an operation id was
accepted, so a caller that lost a receipt can verify instead of guessing. Faults (failures,
outages, slow answers, rejected recipients) are switched on over HTTP to make the "accepted but
receipt not returned" window reproducible. Run it with `python -m services.mailbox serve`.
"""
