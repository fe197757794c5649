# Sourced by bench/setup_sglang.sh and bench/setup_vllm.sh: make a venv beside the project's
# that imports an engine's own code for its side-by-side tests and baselines.
#
# The venv comes from the same base interpreter as the project's .venv (Python 3.11); the
# engine and its pure import-time packages are installed with --no-deps, pinned; torch is not
# installed here: a .pth file appends the project venv's site-packages (its torch) and the
# repository root to sys.path, after this venv's own packages.
#
# make_peer_venv NAME VENV PROBE WHAT PACKAGE...
#   NAME     the calling script's name, for messages
#   VENV     where the venv goes
#   PROBE    Python run from the repository root: it imports what the venv is for
#   WHAT     what the probe imports, for messages
# Idempotent: returns at once when the venv already passes the probe.

make_peer_venv() {
  local name=$1 venv=$2 probe_code=$3 what=$4
  shift 4
  local root main base_py site main_site
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  main=$root/.venv

  probe() { (cd "$root" && "$venv/bin/python" -W ignore -c "$probe_code"); }

  if [ ! -x "$main/bin/python" ]; then
    echo "$name: $main missing; set up the project venv first (see README)" >&2
    return 1
  fi
  if [ -x "$venv/bin/python" ] && probe >/dev/null 2>&1; then
    echo "$name: $venv already imports $what"
    return 0
  fi

  base_py=$("$main/bin/python" -c 'import sys; print(sys._base_executable)')
  "$base_py" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$@"

  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  main_site=$("$main/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  printf '%s\n%s\n' "$main_site" "$root" > "$site/zz_swa_es_main_venv.pth"

  if ! probe >/dev/null 2>&1; then
    echo "$name: the new venv still cannot import $what:" >&2
    probe 2>&1 | tail -5 >&2
    return 1
  fi
  echo "$name: $venv ready"
}
