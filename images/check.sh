#!/usr/bin/env bash
# Check the built images as the pods run them (`make images-check`, after `make images`):
#   * engine-cpu and router in an empty network namespace (no route to PyPI or the Hub), as user
#     10001, on a read-only root with fresh tmpfs at /tmp and /cache only;
#   * the engine serves the built-in model: a chat completion, straight and through the router;
#   * /version names the CPU kernels it runs (a prebuilt build, not the torch fallback);
#   * the router image has no torch.
# `buildah run --isolation chroot` shares the caller's network namespace, so running it under
# `ip netns exec` is what takes the network away.
set -euo pipefail

TAG=${TAG:-dev}
ENGINE=localhost/pagedock/engine-cpu:$TAG
ROUTER=localhost/pagedock/router:$TAG
NETNS=pagedock-check-$$
WORK=$(mktemp -d /var/tmp/pagedock-check.XXXXXX)
CONTAINERS=()

cleanup() {
    local pid ctr
    for pid in $(ip netns pids "$NETNS" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
    sleep 1
    for ctr in "${CONTAINERS[@]}"; do
        umount "$(buildah mount "$ctr")" 2>/dev/null || true
        buildah rm "$ctr" >/dev/null 2>&1 || true
    done
    ip netns delete "$NETNS" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

in_netns() { ip netns exec "$NETNS" "$@"; }

# `read_only_container VAR IMAGE`: VAR names a new working container of IMAGE whose root is
# mounted read-only, as the pods' readOnlyRootFilesystem.
read_only_container() {
    local ctr root
    ctr=$(buildah from --pull=never --quiet "$2")
    CONTAINERS+=("$ctr")
    root=$(buildah mount "$ctr")
    # buildah run opens this file for a bind mount; on a read-only root it must already exist.
    touch "$root/run/.containerenv"
    mount --bind "$root" "$root"
    mount -o remount,bind,ro "$root"
    printf -v "$1" '%s' "$ctr"
}

# Run in CTR as the pods do: user 10001, writable tmpfs only at /tmp and /cache; stdout and
# stderr together. NOTE: buildah 1.28 panics after the command, when its cleanup meets the
# read-only root, so its exit status means nothing here: callers check the output instead.
run_as_pod() {
    local ctr=$1
    shift
    { in_netns buildah run --isolation chroot --user 10001:10001 \
        --mount type=tmpfs,destination=/tmp --mount type=tmpfs,destination=/cache \
        "$ctr" -- "$@" 2>&1 || true; } | sed -u '/^panic: runtime error/,$d'
}

wait_healthy() {
    local url=$1 log=$2 seconds
    for seconds in $(seq 1 300); do
        in_netns curl -sf "$url/health" >/dev/null 2>&1 && { echo "  healthy after ${seconds}s"; return; }
        sleep 1
    done
    echo "FAIL: $url not healthy after 300s; its log:" && tail -30 "$log" && exit 1
}

chat() {
    in_netns curl -sf "$1/v1/chat/completions" -H 'content-type: application/json' -d \
        '{"model": "smollm2-135m-instruct", "max_tokens": 24, "temperature": 0,
          "messages": [{"role": "user", "content": "What is the capital of France?"}]}'
}

ip netns add "$NETNS"
in_netns ip link set lo up
echo "== network namespace $NETNS: $(in_netns ip -brief link | tr -s ' ' | paste -sd';')"

read_only_container engine "$ENGINE"
read_only_container router "$ROUTER"
echo "== no network inside:"
run_as_pod "$engine" python -c "import socket
try:
    socket.create_connection(('pypi.org', 443), timeout=5)
    print('FAIL: pypi.org reachable')
except OSError as e:
    print('  pypi.org unreachable:', e)" | tee "$WORK/net.out"
grep -q unreachable "$WORK/net.out" || { echo "FAIL: the network is reachable"; exit 1; }
echo "== read-only root, writable /tmp and /cache:"
run_as_pod "$engine" sh -c 'id; touch /opt/x; touch /tmp/x /cache/x && echo "/tmp and /cache writable"' \
    | sed 's/^/  /' | tee "$WORK/ro.out"
grep -q "Read-only file system" "$WORK/ro.out" && grep -q "writable" "$WORK/ro.out" \
    || { echo "FAIL: not a read-only root with writable /tmp and /cache"; exit 1; }

echo "== every prebuilt kernel build loads here and matches the torch reference:"
run_as_pod "$engine" python -c "
from pathlib import Path
import torch
from engine.kernels.prebuilt import VARIANTS, load_prebuilt
from engine.layers.norm import rms_norm_reference
x, w = torch.randn(4, 576), torch.randn(576)
for variant in VARIANTS:
    module, loaded = load_prebuilt(Path('/opt/pagedock/kernels'), variant.required_flags)
    torch.testing.assert_close(module.rms_norm(x, w, 1e-5), rms_norm_reference(x, w, 1e-5))
    print('  ok', loaded.march)" | tee "$WORK/variants.out"
[ "$(grep -c '  ok ' "$WORK/variants.out")" = 3 ] || { echo "FAIL: a prebuilt build"; exit 1; }

echo "== engine-cpu: pagedock serve (built-in model)"
run_as_pod "$engine" pagedock serve --host 127.0.0.1 --port 8000 >"$WORK/engine.log" 2>&1 &
wait_healthy http://127.0.0.1:8000 "$WORK/engine.log"
grep -E "C\+\+ CPU kernels|built-in|fetching" "$WORK/engine.log" | sed 's/^/  log: /' || true
version=$(in_netns curl -sf http://127.0.0.1:8000/version)
echo "  /version: $version"
case $version in *'"cpu_kernels":"prebuilt '*) ;; *) echo "FAIL: not the prebuilt kernels"; exit 1 ;; esac
echo "  chat: $(chat http://127.0.0.1:8000 | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])')"

echo "== router: pagedock route (built-in tokenizer) in front of the engine"
run_as_pod "$router" pagedock route --replica http://127.0.0.1:8000 --host 127.0.0.1 --port 8080 \
    >"$WORK/router.log" 2>&1 &
wait_healthy http://127.0.0.1:8080 "$WORK/router.log"
echo "  chat via router: $(chat http://127.0.0.1:8080 | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])')"
run_as_pod "$router" python -c "import torch" >"$WORK/torch.out"
grep -q "No module named 'torch'" "$WORK/torch.out" || { echo "FAIL: the router image has torch"; exit 1; }
echo "  router image: $(grep -o "No module named 'torch'" "$WORK/torch.out")"

echo "== sizes"
buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' --filter reference="localhost/pagedock/*:$TAG"
echo "images-check: OK"
