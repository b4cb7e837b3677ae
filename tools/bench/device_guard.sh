# Sourced first by the tools/bench/h200_*.sh device scripts: `--help` prints the calling
# script's leading comment and exits 0; any other argument is refused (they take their options
# from the environment); and a machine without a GPU stops them before they touch anything
# (they are meant for the device machine, where they wipe and fill their own cache folders).
# Usage, at the top of a script: source "$(dirname "$0")/device_guard.sh" "$0" "$@"
kjit_guard_script=$1
shift
case "${1:-}" in
  -h | --help)
    sed -n '2,/^[^#]/p' "$kjit_guard_script" | sed -n 's/^# \{0,1\}//p'
    exit 0
    ;;
  "") ;;
  *)
    echo "$(basename "$kjit_guard_script"): takes no arguments (options come from the environment; see --help)" >&2
    exit 2
    ;;
esac
if ! nvidia-smi -L > /dev/null 2>&1; then
  echo "$(basename "$kjit_guard_script"): no GPU here (nvidia-smi lists none); it runs on the device machine (see --help)" >&2
  exit 2
fi
