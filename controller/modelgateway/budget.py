"""Token budgets enforced before a call is forwarded: shape the request, reserve, settle.

A budgeted call is forwarded only when its worst case fits in what is left of the agent's
budget: the prompt counted as at most one token per request byte (a token covers at least one
byte of text, and the JSON around each message outweighs the few tokens a chat template adds),
plus the completion capped at ``max_tokens``, which the gateway sets itself. Calls in flight hold
their worst case as a reservation; when a call ends, the provider's measured tokens replace it,
or, where the provider reported none, the reservation is charged in full.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

COMPLETION_FIELDS = ("max_tokens", "max_completion_tokens")
PRICED_PART_TYPES = frozenset({"text", "refusal"})
"""Message content parts whose tokens the prompt bound covers: text, one token per byte at most.
An image, audio or file part costs the provider's own count (a 1 KiB ``image_url`` can cost
thousands of tokens), which no request byte bounds, so the gateway never forwards one."""
UNPRICED_FIELDS = ("audio", "prediction", "web_search_options")
"""Request fields that bill what neither the prompt bound nor the completion cap covers."""


class RequestRefused(Exception):
    """The gateway will not forward this request; ``status`` and ``code`` go to the agent."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(slots=True)
class TokenBudget:
    """One agent's budget: tokens charged by ended calls and reserved by calls in flight."""

    limit: int
    charged: int = 0
    reserved: int = 0

    @property
    def left(self) -> int:
        return self.limit - self.charged - self.reserved

    @property
    def spent(self) -> bool:
        return self.charged >= self.limit

    def settle(self, reservation: Reservation, charged: int | None) -> bool:
        """Release a call's reservation and charge it; whether it cost more than its worst case
        (a provider that reports more than it may have used)."""
        self.reserved -= reservation.tokens
        self.charged += charged or 0
        return charged is not None and charged > reservation.tokens


@dataclass(frozen=True, slots=True)
class Reservation:
    """The worst case of one forwarded call: its prompt bound and its completion cap."""

    prompt_bound: int
    completion_cap: int

    @property
    def tokens(self) -> int:
        return self.prompt_bound + self.completion_cap

    def charge(self, prompt_tokens: int | None, completion_tokens: int | None) -> int:
        """What the call costs the budget: measured figures, the reserved ones where unknown."""
        prompt = self.prompt_bound if prompt_tokens is None else prompt_tokens
        completion = self.completion_cap if completion_tokens is None else completion_tokens
        return prompt + completion


def shape(
    request: dict[str, Any], *, body_bytes: int, cap: int, budget: TokenBudget | None
) -> tuple[dict[str, Any], Reservation | None]:
    """The request as forwarded (one choice, completion capped) and its reservation, if any.

    Raises ``RequestRefused`` for content the gateway cannot price (``unpriced_content``), ``n``
    other than 1, a malformed completion limit, or a call whose worst case the budget cannot
    cover.
    """
    _refuse_unpriced(request)
    n = request.get("n", 1)
    if n is not None and (type(n) is not int or n != 1):
        raise RequestRefused(
            400, "n_unsupported", "the gateway forwards one choice per call: send n=1 or omit it"
        )
    asked: list[int] = []
    for name in COMPLETION_FIELDS:
        value = request.get(name)
        if value is None:
            continue
        if type(value) is not int or value < 1:
            raise RequestRefused(400, "invalid_request", f"{name!r} must be a positive integer")
        asked.append(value)
    allowed = min([*asked, cap])
    reservation: Reservation | None = None
    if budget is not None:
        room = budget.left - body_bytes
        if room < 1:
            raise _over_budget(budget, body_bytes)
        allowed = min(allowed, room)
        reservation = Reservation(body_bytes, allowed)
        budget.reserved += reservation.tokens
    bounded = ("n", *COMPLETION_FIELDS)  # a null one would mean "the provider's default"
    shaped = {k: v for k, v in request.items() if not (k in bounded and v is None)}
    present = [name for name in COMPLETION_FIELDS if name in shaped]
    if budget is not None and not present:
        present = ["max_tokens"]
    for name in present:
        shaped[name] = allowed
    return shaped, reservation


def _over_budget(budget: TokenBudget, body_bytes: int) -> RequestRefused:
    if budget.reserved and budget.limit - budget.charged - body_bytes >= 1:
        return RequestRefused(
            429,
            "budget_reserved",
            f"calls in flight hold {budget.reserved} of the {budget.left + budget.reserved} "
            f"tokens left of this agent's budget; retry once they end",
        )
    return RequestRefused(
        403,
        "token_budget",
        f"this call could use up to {body_bytes + 1} tokens (one per request byte, plus at least "
        f"one completion token) and only {budget.left} of the budget of {budget.limit} are left",
    )


def _refuse_unpriced(request: dict[str, Any]) -> None:
    """Refuse what the worst case cannot price: non-text parts, non-text output, billed tools."""
    for name in UNPRICED_FIELDS:
        if request.get(name) is not None:
            raise _unpriced(f"the gateway does not forward {name!r}: its cost is not priced")
    modalities = request.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise _unpriced('the gateway forwards text output only: send "modalities": ["text"]')
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        if message.get("audio") is not None:  # a reference to earlier audio output
            raise _unpriced("the gateway does not forward a message's 'audio'")
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in PRICED_PART_TYPES or not set(part) <= _PRICED_PART_KEYS:
                raise _unpriced(
                    f"a content part of type {str(kind)[:40]!r} cannot be priced before the call; "
                    f"the gateway forwards only text parts"
                )


_PRICED_PART_KEYS = frozenset({"type", "text", "refusal"})


def _unpriced(message: str) -> RequestRefused:
    return RequestRefused(400, "unpriced_content", message)
