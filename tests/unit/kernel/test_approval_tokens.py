"""Approval tokens: a hash binds a token to one task and one decision."""

from __future__ import annotations

import re

from kernel.turn.approval_tokens import TOKEN_PATTERN, matches, token_hash

TASK = "sub-1:tool:2:0"
TOKEN = "t" * 43


def test_a_token_matches_only_its_task_and_decision() -> None:
    hashes = {
        "approve": token_hash(TASK, "approve", TOKEN),
        "reject": token_hash(TASK, "reject", "r" * 43),
    }

    assert matches(hashes, TASK, "approve", TOKEN)
    assert not matches(hashes, TASK, "reject", TOKEN)
    assert not matches(hashes, "sub-1:tool:2:1", "approve", TOKEN)
    assert not matches(hashes, TASK, "approve", "u" * 43)
    assert not matches(None, TASK, "approve", TOKEN)
    assert not matches({"approve": 7}, TASK, "approve", TOKEN)


def test_the_hash_does_not_contain_the_token_and_tokens_look_like_urlsafe_base64() -> None:
    digest = token_hash(TASK, "approve", TOKEN)

    assert re.fullmatch(r"[0-9a-f]{64}", digest) and TOKEN not in digest
    assert re.fullmatch(TOKEN_PATTERN, TOKEN)
    assert not re.fullmatch(TOKEN_PATTERN, "short")
