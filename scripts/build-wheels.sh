#!/usr/bin/env bash
# Builds the release wheels of the `pycage-run` distribution (import name
# `pycage`) into target/wheels, or --out DIR:
#   - x86_64 manylinux_2_17 (glibc 2.17 or newer), always;
#   - x86_64 musllinux_1_2 (Alpine and other musl systems), with --musl
#     (needs the Rust target: `rustup target add x86_64-unknown-linux-musl`).
# Each wheel holds the Python package (one abi3 module for every
# CPython >= 3.10) and the `pycage` command as a program in the wheel's
# scripts: pip puts it into the environment's bin/, as ruff's and uv's
# wheels do, so a `pycage` call starts no Python.
#
# How: zig (the `ziglang` package) links the module and the command
# against glibc 2.17's symbol versions on this machine, whatever its own
# glibc, without a manylinux container image (which needs a container
# engine). maturin builds the module's wheel and checks it as auditwheel
# does; cargo-zigbuild builds the command, which this script checks the
# same way (the glibc symbol versions and libraries it needs), and maturin
# packs it from its data directory (pyproject.toml, [tool.maturin]).
#
# Needs what a source build needs (Rust, a C compiler, python3 with venv)
# and PyPI once: the pinned tools of scripts/wheel-requirements.txt go
# into a venv (target/wheel-build-venv, or $PYCAGE_WHEEL_VENV). The last
# line of output names each wheel built, one per line after "wheel:".
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/wheels
musl=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=${2:?--out needs a directory}; shift 2 ;;
        --musl) musl=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-wheels.sh: unknown argument '$1' (known: --out DIR, --musl)" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"

venv="${PYCAGE_WHEEL_VENV:-target/wheel-build-venv}"
echo "== build tools (maturin, cargo-zigbuild, zig): venv $venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r scripts/wheel-requirements.txt
# maturin and cargo-zigbuild run zig as `python3 -m ziglang`: the venv's.
export PATH="$PWD/$venv/bin:$PATH"
# A wheel whose runtime could not build its native join library fails,
# instead of shipping the slower Python join (crates/pycage-helper-build).
export PYCAGE_REQUIRE_NATIVE_JOIN=1

# maturin's default data directory for the module `pycage._native`; its
# scripts/ become the wheel's. Never left behind: `pip install .` would
# pack whatever binary it holds.
data=pycage._native.data
rm -rf "$data"
trap 'rm -rf "$data"' EXIT

# The libraries a manylinux program may need from the system (PEP 600:
# the manylinux policy's list for x86_64).
allowed_libs="libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 libgcc_s.so.1 ld-linux-x86-64.so.2"

# check_command BINARY GLIBC|musl: the command runs wherever the wheel's
# tag says it installs.
check_command() {
    local binary=$1 glibc=$2 needed newest lib
    needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    if [ "$glibc" = musl ]; then
        if [ -n "$needed" ]; then
            echo "build-wheels.sh: $binary is not static (it needs: $needed)" >&2
            return 1
        fi
        return 0
    fi
    for lib in $needed; do
        case " $allowed_libs " in
            *" $lib "*) ;;
            *) echo "build-wheels.sh: $binary needs $lib, which a manylinux system need not have" >&2; return 1 ;;
        esac
    done
    newest=$(readelf --dyn-syms -W "$binary" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
    if [ -n "$newest" ] && [ "$(printf '%s\n%s\n' "$newest" "$glibc" | sort -V | tail -n 1)" != "$glibc" ]; then
        echo "build-wheels.sh: $binary needs glibc $newest, newer than the wheel's $glibc" >&2
        return 1
    fi
    echo "   $binary: needs $(echo $needed | tr ' ' ','), glibc ${newest:-none} at most"
}

built=()
# build_wheel TRIPLE ZIG_TARGET COMPATIBILITY GLIBC|musl
build_wheel() {
    local triple=$1 zig_target=$2 compat=$3 glibc=$4 start=$SECONDS
    echo "== the pycage command for $compat ($zig_target)"
    # A target directory of its own: maturin's zig wrapper is another path
    # than cargo-zigbuild's, and cargo rebuilds everything for another
    # linker, so in one directory each build would undo the other's.
    CARGO_TARGET_DIR=target/wheel-command cargo zigbuild --release --locked -p pycage-cli --bin pycage --target "$zig_target"
    local binary="target/wheel-command/$triple/release/pycage"
    check_command "$binary" "$glibc"
    rm -rf "$data"
    mkdir -p "$data/scripts"
    cp "$binary" "$data/scripts/pycage"
    echo "== the wheel for $compat"
    rm -f "$out"/pycage_run-*"$compat"*.whl
    maturin build --release --locked --zig --target "$triple" --compatibility "$compat" --out "$out"
    rm -rf "$data"
    # The sandbox shell helper the module embeds (crates/pycage-py/build.rs)
    # is static: no glibc version of its own to check, and fewer mappings
    # to fork.
    local helper="target/$triple/release/shell-helper-target-static/$triple/release/pycage-shell-helper"
    if [ "$glibc" = musl ]; then
        helper="target/$triple/release/shell-helper-target/$triple/release/pycage-shell-helper"
    fi
    if [ ! -f "$helper" ] || readelf -l "$helper" | grep -q INTERP; then
        echo "build-wheels.sh: the module's shell helper ($helper) is missing or not a static program" >&2
        return 1
    fi
    # The native join library the module embeds (crates/pycage-runtime's
    # build.rs, which PYCAGE_REQUIRE_NATIVE_JOIN=1 above makes fail without
    # it): without it the module's sandboxed runs join in Python, slower; a
    # release wheel has it, for the wheel's glibc.
    local join="target/$triple/release/native-join-target/$triple/release/libpycage_join.so"
    if [ ! -s "$join" ]; then
        echo "build-wheels.sh: the module's native join library ($join) is missing" >&2
        return 1
    fi
    if [ "$glibc" != musl ]; then
        check_command "$join" "$glibc"
    fi
    local wheel
    wheel=$(ls "$out"/pycage_run-*"$compat"*.whl)
    # What pip will install: the module and the command, executable.
    python3 - "$wheel" <<'EOF'
import stat
import sys
import zipfile

wheel = sys.argv[1]
with zipfile.ZipFile(wheel) as zf:
    names = {info.filename: info for info in zf.infolist()}
    scripts = [n for n in names if ".data/scripts/" in n]
    assert [n.rsplit("/", 1)[1] for n in scripts] == ["pycage"], f"{wheel}: scripts are {scripts}"
    mode = names[scripts[0]].external_attr >> 16
    assert mode & stat.S_IXUSR, f"{wheel}: {scripts[0]} is not executable ({oct(mode)})"
    assert any(n.startswith("pycage/_native") and n.endswith(".so") for n in names), f"{wheel}: no pycage/_native*.so"
EOF
    echo "   $(du -h "$wheel" | cut -f1) $wheel, built in $((SECONDS - start)) s"
    built+=("$wheel")
}

build_wheel x86_64-unknown-linux-gnu x86_64-unknown-linux-gnu.2.17 manylinux_2_17 2.17
if [ "$musl" = 1 ]; then
    build_wheel x86_64-unknown-linux-musl x86_64-unknown-linux-musl musllinux_1_2 musl
fi
echo "wheel: ${built[*]}"
