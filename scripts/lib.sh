# Shared helpers for scripts/*: stage timing and paths. Source it; do not run it.
set -euo pipefail
DESKBOX_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${DESKBOX_BUILD_DIR:-$DESKBOX_ROOT/build}"
CACHE_DIR="${DESKBOX_CACHE_DIR:-/var/cache/deskbox}"
export DESKBOX_CACHE_DIR="$CACHE_DIR"
STAGE_LOG="${STAGE_LOG:-}"

_stage_times=()
# How long each stage took the last time it succeeded here, by script and stage name ("test
# build<TAB>297"): a stage says what to expect, and a long one says how far it is every minute.
STAGE_TIMES_FILE="${DESKBOX_STAGE_TIMES:-$CACHE_DIR/stage-times}"
_last_stage_time() {
  [ -r "$STAGE_TIMES_FILE" ] || return 0
  awk -F '\t' -v k="$1" '$1 == k { v = $2 } END { if (v != "") print v }' "$STAGE_TIMES_FILE"
}
_save_stage_time() {
  mkdir -p "$(dirname "$STAGE_TIMES_FILE")" 2>/dev/null || return 0
  local tmp
  tmp=$(mktemp "$STAGE_TIMES_FILE.XXXXXX" 2>/dev/null) || return 0
  { [ -r "$STAGE_TIMES_FILE" ] && awk -F '\t' -v k="$1" '$1 != k' "$STAGE_TIMES_FILE"; printf '%s\t%s\n' "$1" "$2"; } >"$tmp"
  mv -f "$tmp" "$STAGE_TIMES_FILE" 2>/dev/null || rm -f "$tmp"
}
# stage NAME command...: runs the command, prints how long it took (and took last time).
stage() {
  local name="$1"; shift
  local key last t0=$SECONDS rc=0 ticker
  key="$(basename "$0") $name"
  last=$(_last_stage_time "$key")
  printf '\n==> %s%s\n' "$name" "${last:+ (last time ${last} s)}" >&2
  ( sp=""; trap '[ -n "$sp" ] && kill "$sp" 2>/dev/null; exit 0' TERM
    while :; do
      sleep "${DESKBOX_STAGE_TICK:-60}" & sp=$!; wait "$sp"
      printf '... %s: %d s so far%s\n' "$name" $((SECONDS - t0)) "${last:+ of about ${last} s}" >&2
    done ) &
  ticker=$!
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  local dt=$((SECONDS - t0))
  printf '<== %s: %d s%s\n' "$name" "$dt" "${last:+ (last time ${last} s)}" >&2
  _stage_times+=("$(printf '%-22s %5d s' "$name" "$dt")")
  [ "$rc" -eq 0 ] || return "$rc"
  _save_stage_time "$key" "$dt"
}
print_stage_times() {
  printf '\nstage times:\n' >&2
  local s
  for s in "${_stage_times[@]}"; do printf '  %s\n' "$s" >&2; done
}

# build [TARGET...]: configures and builds the targets (all of them when none is named).
build() {
  # ccache keys on paths relative to the checkout, so every clone (CI's is a fresh one each
  # time) reuses what an earlier one compiled. Debug info then names the first clone's paths.
  export CCACHE_BASEDIR="$DESKBOX_ROOT" CCACHE_NOHASHDIR=true
  cmake -S "$DESKBOX_ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  ninja -C "$BUILD_DIR" "$@"
}

# Builds the guest image and the template if their cache keys are missing; prints the
# template's directory name (under $CACHE_DIR/templates) on stdout.
build_artifacts() {
  local image template
  image=$("$DESKBOX_ROOT/desktop-images/image/build-image" --agent "$BUILD_DIR/desktop-images/deskbox-agent" \
            --forward "$BUILD_DIR/desktop-images/deskbox-forward" \
            --cache-dir "$CACHE_DIR")
  template=$("$BUILD_DIR/bin/deskbox-template" --cache-dir "$CACHE_DIR" --image "$(basename "$image")" \
      --screen "${DESKBOX_SCREEN:-1280x800}")
  prune_cache "$(basename "$image")" "$template"
  echo "$template"
}

# prune_cache IMAGE TEMPLATE: removes other images and templates from the cache once they are a
# day old and no process (a QEMU restoring or running from them) names them on its command line.
prune_cache() {
  local keep_image="$1" keep_template="$2" dir
  for dir in "$CACHE_DIR"/images/* "$CACHE_DIR"/templates/*; do
    [ -d "$dir" ] || continue
    case "$(basename "$dir")" in "$keep_image" | "$keep_template" | .*) continue ;; esac
    [ -n "$(find "$dir" -maxdepth 0 -mtime +1)" ] || continue
    if grep -qsF "$dir" /proc/[0-9]*/cmdline; then continue; fi
    echo "cache: removing $dir (superseded)" >&2
    rm -rf "$dir"
  done
}

# Installs the npm packages of the browser-side test clients (tests/e2e) when their lock file
# changed since the last install.
npm_packages() {
  local dir="$DESKBOX_ROOT/tests/e2e"
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "node and npm are needed for the CDP tests (the machine's Node.js 20)" >&2; return 1
  fi
  if [ -f "$dir/node_modules/.package-lock.json" ] && [ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
    echo "npm packages up to date" >&2; return 0
  fi
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}
