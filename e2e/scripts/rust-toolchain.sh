#!/usr/bin/env bash
# Makes the Rust release rust-toolchain.toml pins available to rustup, and prints the host's
# target triple (the Makefile runs it before anything else calls rustc).
#
# Installed already: nothing to do. Otherwise, when rustup's stable toolchain is that very release
# it is linked under the pinned name, so a machine without access to static.rust-lang.org (as on
# CI) builds with what it has: `rustup toolchain link` refuses a release's name, hence the symlink
# in rustup's own directory. Otherwise `rustup toolchain install` fetches it.
#
# Usage: rust-toolchain.sh    (from anywhere; prints e.g. x86_64-unknown-linux-gnu)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pinned=$(sed -n 's/^channel = "\(.*\)"$/\1/p' "$root/rust-toolchain.toml")

if ! command -v rustup >/dev/null; then
  # Rust installed without rustup ignores rust-toolchain.toml: say what it builds with.
  have=$(rustc -V 2>/dev/null | awk '{print $2}')
  [ "$have" = "$pinned" ] || echo "rust-toolchain.sh: no rustup, building with rustc ${have:-(none)} instead of the pinned $pinned" >&2
  rustc -vV 2>/dev/null | sed -n 's/^host: //p'
  exit 0
fi

cd "$root"
if ! rustc -V >/dev/null 2>&1; then
  triple=$(rustup run stable rustc -vV 2>/dev/null | sed -n 's/^host: //p' || true)
  stable=$(rustup run stable rustc -V 2>/dev/null | awk '{print $2}' || true)
  home=${RUSTUP_HOME:-$HOME/.rustup}
  if [ -n "$triple" ] && [ "$stable" = "$pinned" ]; then
    ln -sfn "$(rustup run stable rustc --print sysroot)" "$home/toolchains/$pinned-$triple"
    echo "rust-toolchain.sh: rustup's stable is $pinned: linked it as the pinned toolchain" >&2
  else
    echo "rust-toolchain.sh: installing the pinned Rust $pinned (stable here is ${stable:-none})" >&2
    rustup toolchain install "$pinned" --profile minimal --component rustfmt --component clippy >&2 ||
      echo "rust-toolchain.sh: could not install Rust $pinned: install it with rustup, or build elsewhere" >&2
  fi
fi
rustc -vV 2>/dev/null | sed -n 's/^host: //p'
