#!/usr/bin/env bash
# One short, robust check of torchmpi's GPU paths on a GPU node, with a markdown report.
#
#   bash scripts/gpu-check.sh            # from the repository root (a copy of it is enough)
#
# Writes "$OUT/gpu-report.md" (and each step's full log under "$OUT/gpu-logs/") when OUT is
# set, else prints the report and writes ./gpu-report.md.  Every step has its own timeout,
# a failed step does not stop the others, and the whole run is held under GPU_CHECK_BUDGET
# seconds (default 230): a step that would start past it is reported as SKIP, so the script
# ends within about 4 minutes whatever hangs.  Without a GPU the GPU steps SKIP with the
# reason and the script still ends 0: its verdicts are in the report, not in the exit status.
#
# What the node needs: python3 with torch (pip or site), and what it lacks of the tool's
# Python dependencies as wheels in wheels/ (`make gpu-wheels` fills it) or the repository
# root: pytest and its dependencies for the GPU tests; pyyaml, ruamel.yaml, jsonschema, archspec for the site
# files of `doctor --site`.  No network is used.  PYTHON picks the interpreter (default
# python3); NCCL_TESTS_SRC names an nccl-tests source tree to build and compare with.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
PYTHON=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET:-230}
START=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT/gpu-logs"
    REPORT="$OUT/gpu-report.md"
    LOGS="$OUT/gpu-logs"
else
    REPORT="$ROOT/gpu-report.md"
    LOGS="$WORK/logs"
    mkdir -p "$LOGS"
fi
SUMMARY="$WORK/summary.md"
DETAILS="$WORK/details.md"
: >"$SUMMARY"
: >"$DETAILS"
# Open MPI refuses root without these (Debian's 4.1); launcher variables from an outer
# job would confuse the rank mapping of the one-rank runs.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT

n=0
# record NAME STATUS SECONDS NOTE: one row of the summary table.
record() {
    printf '| %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4" >>"$SUMMARY"
}

# skip NAME WHY: a step that cannot run here, said once in the table.
skip() {
    record "$1" SKIP 0 "$2"
}

# step NAME TIMEOUT COMMAND...: run it with its own timeout (cut to what is left of the
# budget), keep its log, and put its status, time and last lines in the report.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - (SECONDS - START)))
    if [ "$left" -lt 5 ]; then
        LAST_STATUS=SKIP
        LAST_LOG=/dev/null  # no log of this step: never an earlier step's
        skip "$name" "out of the ${BUDGET} s budget"
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    n=$((n + 1))
    local log
    log="$LOGS/$(printf '%02d' "$n")-$(echo "$name" | tr -c 'A-Za-z0-9._-' '_').log"
    LAST_LOG=$log
    local t0=$SECONDS rc status
    if declare -F "$1" >/dev/null; then
        # a function of this script: timeout runs programs, so a bash that has it
        timeout -k 5 "$limit" bash -c "$(declare -f "$1"); $(printf '%q ' "$@")" >"$log" 2>&1
    else
        timeout -k 5 "$limit" "$@" >"$log" 2>&1
    fi
    rc=$?
    case $rc in
        0) status=PASS ;;
        124 | 137) status="TIMEOUT (${limit} s)" ;;
        1) status="${VERDICT:-FAIL} (exit 1)" ;;
        *) status="FAIL (exit $rc)" ;;
    esac
    LAST_STATUS=$status
    record "$name" "$status" "$((SECONDS - t0))" "\`$(basename "$log")\`"
    local shown
    shown=$(printf ' %q' "$@" | tr '\n' ' ')
    [ "${#shown}" -gt 240 ] && shown="${shown:0:240} ..."
    {
        printf '### %s: %s\n\n```\n$%s\n' "$name" "$status" "$shown"
        if [ -n "${FILTER:-}" ]; then
            grep -E "$FILTER" "$log" | tail -n "${TAIL:-30}"
        else
            tail -n "${TAIL:-30}" "$log"
        fi
        printf '```\n\n'
    } >>"$DETAILS"
    return 0
}

# --- 1. the machine ----------------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1; then
    step "nvidia-smi -L" 15 nvidia-smi -L
else
    skip "nvidia-smi -L" "no nvidia-smi on PATH (no NVIDIA driver here)"
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    skip "python" "no $PYTHON on PATH: nothing else can run"
    PYTHON=""
fi

TORCH_INFO='
import torch, torch.distributed as dist
print("torch", torch.__version__, "cuda", torch.version.cuda)
print("cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
for i in range(torch.cuda.device_count()):
    print("  device", i, torch.cuda.get_device_name(i))
v = torch.cuda.nccl.version() if torch.cuda.is_available() else "-"
print("nccl", ".".join(map(str, v)) if isinstance(v, tuple) else v)
print("backends: mpi", dist.is_mpi_available(), "nccl", dist.is_nccl_available(),
      "gloo", dist.is_gloo_available())
'
GPU=0
NOGPU="no GPU: torch.cuda.is_available() is False"
if [ -n "$PYTHON" ]; then
    step "torch version, CUDA, NCCL" 60 "$PYTHON" -c "$TORCH_INFO"
    # Read from that step's own output (one interpreter start that imports torch, not
    # two), whatever its status: the line is printed before anything after it can fail.
    if grep -q '^cuda available True ' "$LAST_LOG"; then
        GPU=1
    elif ! grep -q '^cuda available False ' "$LAST_LOG"; then
        NOGPU="GPU unknown: the torch step ($LAST_STATUS) printed no 'cuda available' line"
    fi
fi
# Why the tool's steps below cannot run, once the venv step did not pass: each of them
# still gets its row, so a cut run lists every step it did not reach.
NOPY="no venv with torch (its step did not pass): the tool's steps cannot run"

# --- 2. the tool's Python: a venv over the node's packages, the repository's wrapper/ -----
# The tests start `torchmpi` from beside sys.executable, so the tool gets a venv of its own
# that sees the node's torch and mpi4py (system site packages and a .pth of the
# interpreter's own site directories) and this checkout's wrapper/.
VENV="$WORK/venv"
PY=""
DEPS="$WORK/pydeps"
export ROOT PYTHON VENV DEPS WORK
mkdir -p "$DEPS"
export PYTHONPATH="$ROOT/wrapper:$DEPS${PYTHONPATH:+:$PYTHONPATH}"
make_venv() {
    local site
    if [ "${GPU_CHECK_VENV:-1}" = 1 ] &&
        "$PYTHON" -m venv --system-site-packages --without-pip "$VENV"; then
        site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        {
            echo "$ROOT/wrapper"
            echo "$DEPS"
            "$PYTHON" -c 'import site
print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))'
        } >"$site/torchmpi-gpu-check.pth"
    else
        # No venv module: a bin/ with a link to the interpreter (sys.executable keeps the
        # link's path, so the tests find torchmpi beside it); PYTHONPATH carries wrapper/.
        echo "no venv: $VENV/bin/python links to $(command -v "$PYTHON")"
        rm -rf "$VENV"
        mkdir -p "$VENV/bin" && ln -s "$(command -v "$PYTHON")" "$VENV/bin/python" || return 1
    fi
    printf '#!%s\nimport sys\nfrom torchmpi.cli import main\nsys.exit(main(sys.argv[1:]))\n' \
        "$VENV/bin/python" >"$VENV/bin/torchmpi"
    chmod +x "$VENV/bin/torchmpi"
    "$VENV/bin/python" -c 'import torch, torchmpi'
}
if [ -n "$PYTHON" ]; then
    # make_venv ends by importing torch and torchmpi in the venv: its PASS says both load.
    step "venv for the tool (wrapper/ on the node's torch)" 60 make_venv
    if [ "$LAST_STATUS" = PASS ] && [ -x "$VENV/bin/torchmpi" ]; then
        PY="$VENV/bin/python"
        export PY PATH="$VENV/bin:$PATH"  # torchmpi and this python first, for the tests too
    fi
fi

# Wheels: wheels/ (carried, ignored by git), else any at the repository root.
install_deps() {
    local links=() missing=() pkg mod
    [ -d "$ROOT/wheels" ] && links+=(--find-links "$ROOT/wheels")
    compgen -G "$ROOT/*.whl" >/dev/null && links+=(--find-links "$ROOT")
    for pkg in pytest:pytest pyyaml:yaml ruamel.yaml:ruamel.yaml jsonschema:jsonschema \
        archspec:archspec; do
        mod=${pkg#*:}
        pkg=${pkg%%:*}
        if "$PY" -c "import $mod" >/dev/null 2>&1; then
            echo "have $pkg"
            continue
        fi
        if [ "${#links[@]}" -gt 0 ] && "$PYTHON" -m pip install --quiet --no-index \
            "${links[@]}" --target "$DEPS" "$pkg" && "$PY" -c "import $mod" 2>/dev/null; then
            echo "installed $pkg from wheels"
        else
            echo "MISSING $pkg (no wheel for it in wheels/): the steps needing it fail"
            missing+=("$pkg")
        fi
    done
    [ "${#missing[@]}" -eq 0 ]
}
if [ -n "$PY" ]; then
    TAIL=10 step "Python dependencies (pip --no-index from wheels/)" 60 install_deps
else
    skip "Python dependencies (pip --no-index from wheels/)" "$NOPY"
fi

TORCHMPI="$VENV/bin/torchmpi"
SIZES="8,1K,64K,1M,16M,256M,1G"
AR=(allreduce --backend nccl --sizes "$SIZES" --warmup 2 --iters 20)

# --- 3. allreduce over NCCL: eager, --graph, --blocking; no launcher, mpirun, torchrun ----
# compare LOG...: one markdown table of the time per size, a column per log, and each
# log's per-call floor, for docs/performance.md.
compare() {
    local log
    echo "| run | per-call floor |"
    echo "|---|---|"
    for log in "$@"; do
        printf '| %s | %s |\n' "$(basename "$log" .log)" \
            "$(sed -n 's/^# per-call floor: \([^ ]* us\).*/\1/p' "$log")"
    done
    echo
    awk 'FNR == 1 { col++ } /^ *[0-9]+ +[0-9]+ +[a-z0-9]+ +sum / {
             if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 }
             t[$1, col] = $5; bw[$1, col] = $6 }
         END {
             printf "| size (B) | eager us | --graph us | --blocking us | algbw eager / graph (GB/s) |\n"
             printf "|---|---|---|---|---|\n"
             for (i = 1; i <= n; i++) { s = order[i]
                 printf "| %s | %s | %s | %s | %s / %s |\n", s, t[s, 1], t[s, 2], t[s, 3],
                     bw[s, 1], bw[s, 2] } }' "$@"
}
if [ -n "$PY" ] && [ "$GPU" = 1 ]; then
    step "allreduce nccl eager (1 rank)" 60 "$TORCHMPI" "${AR[@]}"
    eager=$LAST_LOG
    step "allreduce nccl --graph 5 (1 rank)" 60 "$TORCHMPI" "${AR[@]}" --graph 5
    graph=$LAST_LOG
    step "allreduce nccl --blocking (1 rank)" 60 "$TORCHMPI" "${AR[@]}" --blocking
    compare "$eager" "$graph" "$LAST_LOG" >"$WORK/compare.md" 2>&1
else
    for mode in eager "--graph 5" --blocking; do
        skip "allreduce nccl $mode (1 rank)" "$([ "$GPU" = 1 ] && echo "$NOPY" || echo "$NOGPU")"
    done
fi

# --- 4. the GPU tests (they skip without a GPU; never faked) ----------------------------
if [ -n "$PY" ] && "$PY" -c 'import pytest' >/dev/null 2>&1; then
    PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts= -rs)
    step "GPU tests: allreduce (-k on_a_gpu)" 150 \
        "${PYTEST[@]}" tests/test_allreduce.py -k on_a_gpu
    step "GPU tests: doctor (tests/test_doctor_gpu.py)" 90 \
        "${PYTEST[@]}" tests/test_doctor_gpu.py
else
    why="no pytest (put its wheels in wheels/)"
    [ -z "$PY" ] && why=$NOPY
    skip "GPU tests: allreduce (-k on_a_gpu)" "$why"
    skip "GPU tests: doctor (tests/test_doctor_gpu.py)" "$why"
fi

# --- 5. the doctor: no site with its probes, then each shipped site design (static) -------
if [ -n "$PY" ]; then
    # Exit 1 is the doctor's verdict (a FAIL check), not a crash: the report says so, and
    # shows the FAIL and WARN lines with their fixes.
    VERDICT="FAIL checks" step "doctor (no site, with probes)" 60 "$TORCHMPI" doctor
    for file in sites/*.yaml; do
        site=$(basename "$file" .yaml)
        VERDICT="FAIL checks" FILTER='^(FAIL|WARN) |^ +fix:|PASS,|rror' \
            step "doctor --site $site --no-probe" 20 "$TORCHMPI" doctor --site "$site" \
            --no-probe
    done
else
    skip "doctor (no site, with probes)" "$NOPY"
    for file in sites/*.yaml; do
        skip "doctor --site $(basename "$file" .yaml) --no-probe" "$NOPY"
    done
fi

# --- 6. the same all-reduce under mpirun -n 1 and torchrun --------------------------------
if [ -n "$PY" ] && [ "$GPU" = 1 ]; then
    if command -v mpirun >/dev/null 2>&1; then
        TAIL=15 step "allreduce nccl --graph 5 under mpirun -n 1" 60 \
            mpirun -n 1 -x PATH "$TORCHMPI" "${AR[@]}" --sizes 8,1M,1G --graph 5
    else
        skip "allreduce nccl --graph 5 under mpirun -n 1" "no mpirun on PATH"
    fi
    TAIL=15 step "allreduce nccl eager under torchrun (1 rank)" 60 \
        "$PY" -m torch.distributed.run --standalone --nproc-per-node 1 --no-python \
        "$TORCHMPI" "${AR[@]}" --sizes 8,1M,1G
else
    why=$([ "$GPU" = 1 ] && echo "$NOPY" || echo "$NOGPU")
    skip "allreduce nccl --graph 5 under mpirun -n 1" "$why"
    skip "allreduce nccl eager under torchrun (1 rank)" "$why"
fi

# --- 6b. the MPI backend with CUDA tensors: only a torch built with MPI has one ------------
if [ -n "$PY" ] && [ "$GPU" = 1 ]; then
    if "$PY" -c 'import sys, torch.distributed as d; sys.exit(0 if d.is_mpi_available() else 1)' \
        >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
        TAIL=15 step "allreduce mpi --device cuda under mpirun -n 1" 60 \
            mpirun -n 1 -x PATH "$TORCHMPI" allreduce --backend mpi --device cuda \
            --sizes 8,1M,64M --warmup 2 --iters 10
    else
        skip "allreduce mpi --device cuda under mpirun -n 1" \
            "this torch has no MPI backend (or no mpirun): the patched py-torch is not here"
    fi
else
    skip "allreduce mpi --device cuda under mpirun -n 1" \
        "$([ "$GPU" = 1 ] && echo "$NOPY" || echo "$NOGPU")"
fi

# --- 7. nccl-tests, only where a source tree is at hand ----------------------------------
NCCL_TESTS=""
for dir in "${NCCL_TESTS_SRC:-}" "$ROOT/nccl-tests" "$ROOT/../nccl-tests"; do
    if [ -n "$dir" ] && [ -f "$dir/src/all_reduce.cu" ]; then
        NCCL_TESTS=$dir
        break
    fi
done
if [ -z "$NCCL_TESTS" ]; then
    skip "nccl-tests all_reduce_perf" \
        "no nccl-tests source at hand (NCCL_TESTS_SRC, ./nccl-tests, ../nccl-tests) and no network to fetch it"
elif [ "$GPU" != 1 ] || ! command -v nvcc >/dev/null 2>&1; then
    skip "nccl-tests all_reduce_perf" "source at $NCCL_TESTS, but no GPU or no nvcc"
else
    # NCCL's headers and library from the pip wheel torch uses (nvidia-nccl-*), if any.
    NCCL_HOME=${NCCL_HOME:-$("$PY" -c 'import os, nvidia.nccl as n
print(os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])' 2>/dev/null)}
    build_nccl_tests() {
        cp -r "$NCCL_TESTS" "$WORK/nccl-tests" &&
            make -C "$WORK/nccl-tests" -j 8 src.build MPI=0 NCCL_HOME="$NCCL_HOME" \
                BUILDDIR="$WORK/nccl-tests/build" >/dev/null &&
            ls "$WORK/nccl-tests/build/all_reduce_perf"
    }
    export NCCL_TESTS NCCL_HOME
    step "nccl-tests build (NCCL_HOME=$NCCL_HOME)" 120 build_nccl_tests
    perf="$WORK/nccl-tests/build/all_reduce_perf"
    if [ -x "$perf" ]; then
        export LD_LIBRARY_PATH="$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        step "nccl-tests -g 1 -G 5" 60 "$perf" -b 8 -e 1G -f 8 -g 1 -w 2 -n 10 -G 5
        step "nccl-tests -g 1 -z 1" 60 "$perf" -b 8 -e 1G -f 8 -g 1 -w 2 -n 10 -z 1
    fi
fi

# --- the report ---------------------------------------------------------------------------
{
    echo "# torchmpi GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), host \`$(hostname)\`, commit" \
        "\`$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)\`," \
        "$((SECONDS - START)) s of a ${BUDGET} s budget; GPU visible to torch: $([ "$GPU" = 1 ] && echo yes || echo no)."
    echo
    echo "| step | status | s | log |"
    echo "|---|---|---|---|"
    cat "$SUMMARY"
    echo
    if [ -s "$WORK/compare.md" ]; then
        echo "## allreduce over NCCL on one GPU, in place: time per operation"
        echo
        cat "$WORK/compare.md"
        echo
    fi
    echo "## Output (last lines of each step)"
    echo
    cat "$DETAILS"
} >"$REPORT"
if [ -z "${OUT:-}" ]; then
    cat "$REPORT"
fi
exit 0
