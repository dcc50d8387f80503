"""ServedModels: what one replica serves, from its GET /v1/models: its base model and each LoRA
adapter, an entry with a `parent` (the base model's id), as pagedock and vLLM list them.

Adapters come and go at run time (/v1/load_lora_adapter, /v1/unload_lora_adapter), so the health
checker reads the list again every check (router/replicas/health.py). `merged_model_list` is the
router's own GET /v1/models: every base model and the union of the adapters of ready replicas.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ServedModels:
    cards: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each model's card as the replica listed it, by id (extra fields kept for the router's own
    list)."""

    def serves(self, model: str) -> bool:
        return model in self.cards

    def is_adapter(self, model: str) -> bool:
        card = self.cards.get(model)
        return card is not None and card.get("parent") is not None

    def adapters(self) -> list[str]:
        return sorted(m for m in self.cards if self.is_adapter(m))

    def kv_root(self, model: str) -> bytes | None:
        """The block-hash root a pagedock engine lists for the adapter (`kv_root_hash`); None when
        it lists none or not one of 32 bytes in hex."""
        listed = (self.cards.get(model) or {}).get("kv_root_hash")
        try:
            root = bytes.fromhex(listed) if isinstance(listed, str) else None
        except ValueError:
            return None
        return root if root is not None and len(root) == 32 else None

    def without(self, model: str) -> ServedModels:
        """The set less `model` (the replica refused it since it was listed)."""
        return ServedModels({m: c for m, c in self.cards.items() if m != model})


def parse_model_list(payload: object) -> ServedModels | None:
    """A GET /v1/models answer ({"object": "list", "data": [cards]}); None when it is not one.
    Entries without a string id are skipped."""
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        return None
    cards = {
        card["id"]: card
        for card in payload["data"]
        if isinstance(card, dict) and isinstance(card.get("id"), str)
    }
    return ServedModels(cards)


def merged_model_list(served: Iterable[ServedModels]) -> dict[str, Any]:
    """One model list for the whole fleet: the base models first (in the order the replicas
    list them), then every adapter any of them serves, by id; a model listed by several
    replicas appears once, with the first replica's card."""
    cards: dict[str, dict[str, Any]] = {}
    served = list(served)
    for models in served:
        for model_id, card in models.cards.items():
            if not models.is_adapter(model_id):
                cards.setdefault(model_id, card)
    for model_id, card in sorted(_adapter_cards(served), key=lambda item: item[0]):
        cards.setdefault(model_id, card)
    return {"object": "list", "data": list(cards.values())}


def _adapter_cards(served: list[ServedModels]) -> Iterator[tuple[str, dict[str, Any]]]:
    seen: set[str] = set()
    for models in served:
        for model_id in models.adapters():
            if model_id not in seen:
                seen.add(model_id)
                yield model_id, models.cards[model_id]
