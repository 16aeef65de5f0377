#!/usr/bin/env bash
# Replays the Dockerfile's build stage without a Docker daemon: the paths its COPY lines bring
# (from the build context, less what .dockerignore leaves out) are copied into an empty folder
# laid out as the stage's WORKDIR, and its `cargo build` command runs there with `--locked`.
# A path the stage forgets to copy (a workspace member, build.rs, a file `include_str!` reads)
# fails here as it would in `docker build`. The files the runtime stage copies from the build
# context and the binary it copies from the build stage must exist too.
#
#   scripts/docker-build-replay.sh            # the stage's own command (release, as the image)
#   scripts/docker-build-replay.sh --debug    # the same without --release (faster)
#   scripts/docker-build-replay.sh --check    # no second build (what scripts/test runs): the
#                                             # workspace loads from the copied paths with the
#                                             # lock file as it is, and every file of the
#                                             # checkout the debug build of agentd's crates
#                                             # read (rustc's dep-info, target/debug/deps/*.d,
#                                             # and the build scripts' rerun-if-changed paths)
#                                             # is in the copy. Needs that build done first.
#
# CARGO_TARGET_DIR (default: ./target) is reused, so the registry dependencies built before are
# not built again; the folder is always emptied first. Run from anywhere; exits non-zero on any
# failure and says which line of the Dockerfile it was.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

profile=dockerfile
case "${1:-}" in
  "") ;;
  --debug) profile=debug ;;
  --check) profile=check ;;
  -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
  *) echo "usage: $0 [--debug|--check]" >&2; exit 2 ;;
esac

dockerfile="${DOCKERFILE:-$root/Dockerfile}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
context="$target_dir/docker-replay/context"

# The build stage: from the first `FROM … AS <name>` to the next FROM. Continuation lines
# (a trailing backslash) are joined first.
stage_lines() {
  awk '
    { line = $0 }
    /\\[[:space:]]*$/ { sub(/\\[[:space:]]*$/, "", line); buf = buf line " "; next }
    { print buf line; buf = "" }
  ' "$dockerfile" | awk '
    /^[[:space:]]*FROM[[:space:]]/ { n++; if (n == 1) { print; next } else exit }
    n == 1 { print }
  '
}

stage="$(stage_lines)"
from=$(printf '%s\n' "$stage" | awk 'toupper($1) == "FROM" {print $2; exit}')
stage_name=$(printf '%s\n' "$stage" | awk 'toupper($1) == "FROM" && toupper($3) == "AS" {print $4; exit}')
[ -n "$stage_name" ] || { echo "Dockerfile: the first FROM has no 'AS <name>' build stage" >&2; exit 1; }
workdir=$(printf '%s\n' "$stage" | awk 'toupper($1) == "WORKDIR" {w = $2} END {print w}')
[ -n "$workdir" ] || { echo "Dockerfile: the build stage has no WORKDIR" >&2; exit 1; }
echo "replaying build stage '$stage_name' ($from, WORKDIR $workdir) in $context"

# The toolchain the image uses (rust:<version>-…) against the one here: a different one may
# accept or refuse what the image's would not.
want=$(printf '%s' "$from" | sed -n 's/^rust:\([0-9][0-9.]*\).*/\1/p')
have=$(rustc --version | awk '{print $2}')
if [ -n "$want" ] && [ "${have#"$want"}" = "$have" ]; then
  echo "WARNING: the image builds with Rust $want; this machine has $have" >&2
fi

# .dockerignore, as Docker reads it: a pattern is a path from the context's root (`target/`,
# `*.log`, `benches/peers/`), unless it starts with `**/` (that name at any depth).
ignored=()
if [ -f .dockerignore ]; then
  while IFS= read -r p; do
    p="${p%%#*}"; p="${p%"${p##*[![:space:]]}"}"; p="${p#"${p%%[![:space:]]*}"}"
    [ -n "$p" ] && ignored+=("$p")
  done < .dockerignore
fi
ignored_top() {
  local name="$1" p
  for p in "${ignored[@]}"; do
    p="${p%/}"
    [[ "$p" != */* ]] || continue
    # shellcheck disable=SC2053
    [[ "$name" == $p ]] && return 0
  done
  return 1
}
prune() {
  local dir="$1" p f
  for p in "${ignored[@]}"; do
    p="${p%/}"
    if [[ "$p" == '**/'* ]]; then
      find "$dir" -depth -name "${p#'**/'}" -exec rm -rf {} + 2>/dev/null || true
    else
      for f in "$dir"/$p; do [ -e "$f" ] && rm -rf "$f"; done
    fi
  done
  return 0
}

# The build context `docker build .` would send: the checkout less what .dockerignore names
# (and never the target folder this replay works in).
build_ctx="$target_dir/docker-replay/build-context"
rm -rf "$build_ctx" "$context"
mkdir -p "$build_ctx" "$context"
for e in "$root"/* "$root"/.[!.]*; do
  [ -e "$e" ] || continue
  name="$(basename "$e")"
  [ "$(cd "$e" 2>/dev/null && pwd)" != "$(cd "$target_dir" && pwd)" ] || continue
  ignored_top "$name" && continue
  cp -a "$e" "$build_ctx/"
done
prune "$build_ctx"

copied=0
cargo_cmd=""
while IFS= read -r line; do
  set -f
  # shellcheck disable=SC2206
  words=($line)
  set +f
  [ "${#words[@]}" -gt 0 ] || continue
  instr=$(printf '%s' "${words[0]}" | tr '[:lower:]' '[:upper:]')
  case "$instr" in
    COPY|ADD)
      args=("${words[@]:1}")
      for a in "${args[@]}"; do
        case "$a" in --from=*) echo "Dockerfile: '$line': a COPY --from in the build stage is not replayed" >&2; exit 1 ;; esac
      done
      srcs=()
      for a in "${args[@]}"; do case "$a" in --*) ;; *) srcs+=("$a") ;; esac; done
      [ "${#srcs[@]}" -ge 2 ] || { echo "Dockerfile: cannot read '$line'" >&2; exit 1; }
      dest="${srcs[-1]}"
      unset 'srcs[-1]'
      case "$dest" in /*) rel="${dest#"$workdir"}" ;; *) rel="$dest" ;; esac
      for s in "${srcs[@]}"; do
        if [ ! -e "$build_ctx/$s" ]; then
          echo "Dockerfile: '$line': $s is not in the build context" >&2
          exit 1
        fi
        if [ "${#srcs[@]}" -gt 1 ] || [[ "$dest" == */ ]]; then
          mkdir -p "$context/$rel"
          out="$context/$rel/$(basename "$s")"
        else
          out="$context/$rel"
          mkdir -p "$(dirname "$out")"
        fi
        if [ -d "$build_ctx/$s" ]; then
          mkdir -p "$out"
          cp -a "$build_ctx/$s/." "$out/"
        else
          cp -a "$build_ctx/$s" "$out"
        fi
        copied=$((copied + 1))
      done
      ;;
    RUN)
      if printf '%s' "$line" | grep -q 'cargo build'; then
        cargo_cmd="${line#*RUN}"
      fi
      ;;
  esac
done <<< "$stage"
[ -n "$cargo_cmd" ] || { echo "Dockerfile: the build stage runs no 'cargo build'" >&2; exit 1; }
echo "copied $copied path(s):"
(cd "$context" && find . -maxdepth 1 -not -path . | sort | sed 's/^/  /')

if [ "$profile" = check ]; then
  # rustc's dep-info of each crate the image builds (the `agentd` package and the crates under
  # crates/, not the benchmarks, whose sources the image does not compile), in the debug build
  # that ran before.
  depinfos=()
  for d in "$target_dir"/debug/deps/agentd-*.d "$target_dir"/debug/deps/agentd_*.d; do
    case "$(basename "$d")" in agentd_bench-*) continue ;; esac
    [ -f "$d" ] && depinfos+=("$d")
  done
  [ "${#depinfos[@]}" -gt 0 ] || { echo "--check: no dep-info of agentd's crates under $target_dir/debug/deps (build in debug first)" >&2; exit 1; }
  (cd "$context" && cargo metadata --locked --format-version 1 >/dev/null) \
    || { echo "Dockerfile: the workspace does not load from what the build stage copies (a member or Cargo.lock missing?)" >&2; exit 1; }
  # Every file of the checkout the build read: the dep-info's paths (`target: dep dep …`, a
  # space in a path escaped as `\ `), and what the workspace's build scripts watch.
  read_files() {
    # cargo runs rustc from the workspace root, so a workspace crate's files are relative to it.
    sed -e 's/\\ /\x01/g' "${depinfos[@]}" | tr ' ' '\n' | sed -e 's/:$//' -e 's/\x01/ /g' \
      | while IFS= read -r p; do
          [ -n "$p" ] || continue
          case "$p" in /*) ;; *) p="$root/$p" ;; esac
          realpath -m "$p"
        done | grep "^$root/" || true
    for out in "$target_dir"/debug/build/agentd-*/output; do
      [ -f "$out" ] || continue
      name="$(basename "$(dirname "$out")")"
      dir="$root/crates/${name%-*}"
      [ -d "$dir" ] || dir="$root"
      sed -n 's/^cargo::\{0,1\}rerun-if-changed=//p' "$out" | while read -r rel; do
        find "$(realpath -m "$dir/$rel")" -type f 2>/dev/null || true
      done
    done
  }
  missing=0
  checked=0
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    rel="${f#"$root"/}"
    case "$rel" in target/*) continue ;; esac
    # A path an older build read that this checkout no longer has is no input of this build.
    [ -e "$f" ] || continue
    checked=$((checked + 1))
    if [ ! -e "$context/$rel" ]; then
      echo "Dockerfile: the build reads $rel, which the build stage does not copy" >&2
      missing=1
    fi
  done < <(read_files | sort -u)
  [ "$missing" = 0 ] || exit 1
  [ "$checked" -gt 0 ] || { echo "--check: no file of this checkout in the dep-info of $target_dir/debug/deps" >&2; exit 1; }
  echo "docker build replay (check): the workspace loads, and the $checked files the build reads are copied"
  exit 0
fi

# The stage's command, made to fail on a lock file that does not match, and in debug on request.
cmd="$cargo_cmd"
case " $cmd " in *" --locked "*) ;; *) cmd="$cmd --locked" ;; esac
out_profile=debug
case " $cmd " in *" --release "*) out_profile=release ;; esac
if [ "$profile" = debug ]; then
  cmd="${cmd/ --release/}"
  out_profile=debug
fi
echo "running in $context:$cmd  (CARGO_TARGET_DIR=$target_dir)"
started=$(date +%s)
(cd "$context" && CARGO_TARGET_DIR="$target_dir" bash -c "$cmd")
echo "build stage replayed in $(( $(date +%s) - started )) s"

# What the runtime stage copies: the binary from the build stage, files from the context.
bin_path=$(awk 'toupper($1) == "COPY" && $2 ~ /^--from=/ {print $3; exit}' "$dockerfile")
if [ -n "$bin_path" ]; then
  rel_bin="${bin_path#"$workdir"/target/}"
  [ "$rel_bin" != "$bin_path" ] || { echo "Dockerfile: the runtime stage copies $bin_path, not under $workdir/target" >&2; exit 1; }
  rel_bin="${rel_bin/#release\//$out_profile/}"
  [ -x "$target_dir/$rel_bin" ] || { echo "Dockerfile: the runtime stage copies $bin_path, which the build did not make" >&2; exit 1; }
  echo "runtime stage: $bin_path is built ($target_dir/$rel_bin)"
fi
awk '
  /^[[:space:]]*FROM[[:space:]]/ { n++ }
  n >= 2 && toupper($1) == "COPY" && $2 !~ /^--from=/ { for (i = 2; i < NF; i++) print $i }
' "$dockerfile" | while read -r p; do
  [ -e "$build_ctx/$p" ] || { echo "Dockerfile: the runtime stage copies $p, which is not in the build context" >&2; exit 1; }
done
echo "docker build replay: ok"
