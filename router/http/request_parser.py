"""RequestParser: a generation request's body as the router needs it, for the HTTP API
(router/server/app.py) and the endpoint picker (router/picker/endpoint_picker.py) alike: the
request as the engine will read it, the model it names (the base model or a LoRA adapter, which
decides the replicas it may go to and the chain its blocks are hashed on: the dispatcher's part),
its prompt's blocks, and the plan to resume its stream. A Responses API request is read the same
way (its prompt hashed when it starts a conversation; its stream is not resumable); an embeddings
request is read for its model, tenant and priority only (not hashed: it is routed by load).

The router never judges a request's content: a body it can't parse is None here, and is still
forwarded (the engine answers it). One exception: a client's `continuation` is refused with a 400
(ClientContinuation), never passed on: continuations are the router's own (its in-flight failover,
router/http/stream_resume.py), and only it holds the engines' internal key for them.

When the router salts by tenant, a body that parses is forwarded, hashed and resumed with its
tenant's `cache_salt` (router/http/tenant_salt.py); one that does not is forwarded as it came,
and the engine refuses it for the same reason the parser did.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import Executor
from dataclasses import dataclass

from pagedock.http.errors import APIError
from pagedock.http.validation_process import InvalidBody, ValidationProcess, validate_body
from pagedock.protocol import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from pagedock.protocol.responses import ResponsesRequest
from pagedock.tenancy.tenants import Tenant
from router.config import RouterConfig
from router.http.stream_resume import ResumePlan, resume_plan
from router.http.tenant_salt import forwarded_salt, with_fields
from router.kv.prompt_hasher import PromptBlocks, PromptHasher

# Bodies up to this size are parsed and hashed on the event loop (tens of microseconds); larger
# ones in the parser's pool (the router context's small prompt pool).
INLINE_PARSE_BYTES = 16_384

GenerationRequest = ChatCompletionRequest | CompletionRequest | ResponsesRequest | EmbeddingRequest


class ClientContinuation(APIError):
    """A client's request carries `continuation`, which only the router itself sends."""

    def __init__(self) -> None:
        super().__init__(
            400,
            "`continuation` is set by pagedock's router only (to resume a stream on another "
            "replica), never by a client: remove it from the request",
            param="continuation",
            code="continuation_not_allowed",
        )


@dataclass
class Parsed:
    request: GenerationRequest | None
    """The request as the engine reads it; None: the engine says why."""
    blocks: PromptBlocks | None
    """Its prompt's token ids, hashed under whichever root a replica needs."""
    plan: ResumePlan | None
    """How to resume its stream on another replica; None: not resumable."""
    model: str | None
    """Its `model` field (of a body that does not validate too); None: not named."""
    body: bytes
    """The body to forward: the client's, with its tenant's `cache_salt` when the router salts
    by tenant (router/http/tenant_salt.py)."""


class RequestParser:
    def __init__(
        self,
        config: RouterConfig,
        hasher: PromptHasher,
        pool: Executor,
        validation: ValidationProcess | None = None,
    ) -> None:
        self.config = config
        self.hasher = hasher
        self.pool = pool
        """Hashes large bodies off the event loop."""
        self.validation = validation or ValidationProcess()
        """Validates large bodies off this process's GIL."""

    async def parse_and_hash(
        self,
        body: bytes,
        model: type[GenerationRequest],
        tenant: str | None = None,
        owner: Tenant | None = None,
    ) -> Parsed:
        """The parsed request, its prompt's blocks and, for a stream the router can resume
        mid-way, its plan; a large body is parsed off the event loop: a long prompt must not hold
        up every other request's routing. `tenant`: the tag of the request's tenant when the
        router salts by tenant (None: the body's own `cache_salt`, if any, is forwarded as is).
        `owner`: the request's tenant, whose priority bounds the request's (vLLM's `priority`)."""
        if len(body) <= INLINE_PARSE_BYTES:
            return self._hash(validate_body(model, body), body, tenant, owner)
        # NOTE: validating holds the GIL throughout, and a large body's validation takes
        # milliseconds per hundred kilobytes: it runs in the validation process, only the hashing
        # (which releases the GIL as it tokenizes) in the pool.
        outcome = await self.validation.validate(model, body)
        work = functools.partial(self._hash, outcome, body, tenant, owner)
        return await asyncio.get_running_loop().run_in_executor(self.pool, work)

    def _hash(
        self,
        outcome: GenerationRequest | InvalidBody,
        body: bytes,
        tenant: str | None,
        owner: Tenant | None = None,
    ) -> Parsed:
        """parse_and_hash's work once the body is validated (a body that is not is forwarded as
        it came, to a replica serving the model it names: the engine says why); a body over
        --max-hash-bytes is routed by load alone (affinity for a huge prompt is not worth
        tokenizing it twice; the engine answers if it is too long); ClientContinuation for a
        request with `continuation`."""
        parsed = None if isinstance(outcome, InvalidBody) else outcome
        named = outcome.model
        if getattr(parsed, "continuation", None) is not None:  # a Responses request has none
            raise ClientContinuation()
        if parsed is not None:
            body = _with_tenant(parsed, body, tenant, owner)
        plan = None
        if self.config.max_stream_resumes and not isinstance(parsed, EmbeddingRequest):
            plan = resume_plan(parsed, body)
        if len(body) > self.config.max_hash_bytes:
            return Parsed(parsed, None, plan, named, body)
        return Parsed(parsed, self._prompt_blocks(parsed), plan, named, body)

    def _prompt_blocks(self, parsed: GenerationRequest | None) -> PromptBlocks | None:
        if isinstance(parsed, ChatCompletionRequest):
            return self.hasher.chat(parsed)
        if isinstance(parsed, CompletionRequest):
            return self.hasher.completion(parsed)
        if isinstance(parsed, ResponsesRequest):
            return self.hasher.response(parsed)
        return None


def _with_tenant(
    parsed: GenerationRequest, body: bytes, tenant: str | None, owner: Tenant | None
) -> bytes:
    """The body as forwarded: under its tenant's salt (hashed and resumed so too), at the
    priority its tenant allows."""
    changes: dict[str, object] = {}
    if tenant is not None:
        parsed.cache_salt = changes["cache_salt"] = forwarded_salt(tenant, parsed.cache_salt)
    if owner is not None:
        asked = parsed.priority if "priority" in parsed.model_fields_set else None
        priority = owner.effective_priority(asked)
        if priority != asked:
            parsed.priority = changes["priority"] = priority
    return with_fields(body, changes) if changes else body
