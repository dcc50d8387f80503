"""LoRAAdapters: the engine's served adapters while it runs (vLLM's add_lora, remove_lora,
list_loras), over the registry (engine/lora/adapter_registry.py), the scheduler's slots and the
worker's weights (engine/lora/lora_manager.py).

Loading reads and checks an adapter exactly as the start does (`load_adapter`: the same errors),
then serves it: its name becomes valid in requests at once. Loading a name already served from
the same path does nothing; from another path it is refused, naming both. Unloading takes the name
out of the served set at once (new requests for it are UnknownAdapterError), while the requests
already queued or running for it finish normally; its slot and weights are released after the last
of them (`reap`, after every step, abort and stop).

Everything but `read` runs where the engine runs (the engine thread under AsyncEngine); `read`
touches no engine state, so AsyncEngine reads an adapter's files off the engine thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.config import EngineConfig
from engine.core.scheduler import Scheduler
from engine.inputs.engine_request import AdapterRef, UnknownAdapterError
from engine.inputs.input_processor import same_path
from engine.lora.adapter import LoRAAdapter, load_adapter
from engine.lora.adapter_config import check_adapter_names
from engine.lora.adapter_registry import LoRARegistry, ServedAdapter
from engine.model_config import ModelConfig
from engine.models.llama_lora import lora_shapes
from engine.runtime.weights_identity import weights_fingerprint
from pagedock.errors import InvalidRequestError

if TYPE_CHECKING:
    import torch

    from engine.lora.lora_manager import LoRAManager


class LoRAAdapters:
    def __init__(
        self,
        config: EngineConfig,
        served_model_name: str,
        model_config: ModelConfig,
        dtype: torch.dtype,
        manager: LoRAManager | None,
        scheduler: Scheduler,
    ) -> None:
        """`manager`: the worker's weights, holding the adapters of `config.lora_modules` (None
        with LoRA off); they are served from the start, with ids 1, 2, ... in their order."""
        self.config = config
        self.served_model_name = served_model_name
        self.model_config = model_config
        self.dtype = dtype
        self.manager = manager
        self.scheduler = scheduler
        self.registry = LoRARegistry()
        for name, path in config.lora_paths().items():
            assert manager is not None
            self.registry.add(name, path, self._root_for(manager.adapters[name]))

    # ---- loading --------------------------------------------------------------------------

    def add(self, lora_request: AdapterRef) -> bool:
        """Load and serve the adapter; True when loaded now, False when it was already served from
        that path (nothing done). ModelLoadError, ConfigError (as at start), InvalidRequestError
        (LoRA off, a name in use)."""
        if not self.check_new(lora_request):
            return False
        return self.serve(self.read(lora_request), lora_request.path)

    def check_new(self, lora_request: AdapterRef) -> bool:
        """Whether the adapter is one to load (False: already served from that path); the error
        when it cannot be loaded under that name."""
        name, path = lora_request.name, lora_request.path
        if not self.config.enable_lora:
            raise InvalidRequestError(
                f"cannot load LoRA adapter {name!r}: LoRA is off on this engine (start it with "
                "enable_lora, --enable-lora)",
                "lora_name",
            )
        if not name.strip():
            raise InvalidRequestError("a LoRA adapter needs a name (lora_name)", "lora_name")
        if not path.strip():
            raise InvalidRequestError(
                f"LoRA adapter {name!r} needs a path (lora_path)", "lora_path"
            )
        check_adapter_names([name], self.served_model_name)  # ConfigError, as at start
        served = self.registry.adapter(name)
        if served is not None:
            if same_path(served.path, path):
                return False
            raise InvalidRequestError(
                f"LoRA adapter {name!r} is already served from {served.path}; unload it before "
                f"loading it from {path}",
                "lora_path",
            )
        if name in self.registry.unloading:
            raise InvalidRequestError(
                f"LoRA adapter {name!r} is still unloading: requests that started with it have "
                "not finished yet; load it again once they have",
                "lora_name",
            )
        return True

    def read(self, lora_request: AdapterRef) -> LoRAAdapter:
        """Read and check the adapter's files against this engine's model, as the start does
        (no engine state is touched: any thread may call it)."""
        return load_adapter(
            lora_request.name,
            lora_request.path,
            max_rank=self.config.max_lora_rank,
            shapes=lora_shapes(self.model_config),
            num_layers=self.model_config.num_hidden_layers,
            dtype=self.dtype,
        )

    def serve(self, adapter: LoRAAdapter, path: str) -> bool:
        """Serve an adapter `read` made (checked again: the set may have changed meanwhile)."""
        if not self.check_new(AdapterRef(adapter.name, path)):
            return False
        assert self.manager is not None
        self.manager.add_adapter(adapter)
        self.registry.add(adapter.name, path, self._root_for(adapter))
        return True

    def _root_for(self, adapter: LoRAAdapter) -> str:
        """The root (hex) the adapter's requests chain their block hashes from, by its weights."""
        kv = self.scheduler.kv_cache_manager
        return kv.set_adapter_weights(adapter.name, weights_fingerprint(adapter.path)).hex()

    # ---- unloading ------------------------------------------------------------------------

    def remove(self, name: str | int) -> None:
        """Stop serving the adapter `name` (or with that id); its queued and running requests
        finish. UnknownAdapterError when it is not served."""
        key = self.registry.name_of(name) if isinstance(name, int) else name
        if key is None or self.registry.adapter(key) is None:
            served = ", ".join(repr(a) for a in self.registry) or "none"
            unloading = " (it is being unloaded)" if key in self.registry.unloading else ""
            raise UnknownAdapterError(
                f"LoRA adapter {name!r} is not loaded{unloading}; this engine serves: {served}",
                "lora_name",
            )
        self.registry.remove(key)
        self.reap()

    def reap(self) -> None:
        """Release the slots and weights of unloaded adapters whose last request has finished."""
        unloading = self.registry.unloading
        if not unloading:
            return
        assert self.manager is not None
        requests = self.scheduler.requests.values()
        in_flight = {r.lora_name for r in requests if r.lora_name is not None}
        for name in unloading:
            if name in in_flight:
                continue
            if self.scheduler.lora_slots is not None:
                self.scheduler.lora_slots.forget(name)
            self.manager.remove_adapter(name)
            self.registry.finish_unloading(name)

    def served(self) -> list[ServedAdapter]:
        """The served adapters, in load order."""
        return self.registry.adapters()
