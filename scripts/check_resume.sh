#!/usr/bin/env bash
# Kill-and-restart check of the grid's workflow: a grid killed midway and started again must finish
# with exactly the records of an uninterrupted run, with <jobs> Snakemake jobs side by side.
#
# On a fresh clone of this repository (its own .venv, set up by `make setup`) and an empty cache:
#   1. `make reproduce PROFILE=<profile> JOBS=<jobs> FORCE=1` runs the whole grid: the reference records;
#   2. the records and the cache are removed, the grid is started again and killed (SIGKILL to
#      Snakemake's process group, to its jobs and to their notebook kernels) after <kill_after>
#      seconds, then started again without FORCE, so that it resumes;
#   3. scripts/compare_records.py compares every results.json of the two runs, leaving out only
#      what differs between any two runs (wall times, timestamps).
# The second run is killed several times if asked (several kill times).
#
#   scripts/check_resume.sh [profile (tiny)] [kill_after seconds, space-separated ("200 400")] [jobs (2)]
# Each kill time counts from the (re)start before it. Prints the comparison; exits non-zero when
# the records differ. One pass of the tiny grid took 13 min here on two cores shared with another
# job at lower priority (02: 2 min, the six 05 runs: 5 min, the three attacks: 4 min), so the
# default kills land in notebook 05 and in notebook 06; the smol grid takes about a day.
set -euo pipefail
profile=${1:-tiny}
kills=${2:-"200 400"}
jobs=${3:-2}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d /tmp/frag_resume.XXXXXX)
git clone -q "$repo" "$work/repo"
cd "$work/repo"
make setup > "$work/setup.log" 2>&1
export FRAG_CACHE_DIR="$work/cache"

echo "== reference: the whole $profile grid, uninterrupted ($(date -u +%T))"
make reproduce PROFILE="$profile" JOBS="$jobs" FORCE=1 > "$work/reference.log" 2>&1
mkdir -p "$work/reference"
cp -r papermill_runs "$work/reference/"

echo "== interrupted: records and cache removed, then killed after ${kills} s"
git checkout -q -- papermill_runs && git clean -qfdx papermill_runs
rm -rf "$FRAG_CACHE_DIR"
# every run of the profile must be redone: remove the committed records of this profile too
find papermill_runs -mindepth 2 -maxdepth 2 -type d -name "${profile}*" -not -path "papermill_runs/params/*" \
  -exec rm -rf {} +
for k in $kills; do
  setsid make reproduce PROFILE="$profile" JOBS="$jobs" > "$work/killed_$k.log" 2>&1 &
  pid=$!
  sleep "$k"
  if kill -0 "$pid" 2> /dev/null; then
    kill -KILL -- -"$pid" || true
    # Snakemake's jobs and the notebooks' kernels run in sessions of their own: kill them too, at
    # once, as a machine going down would, before anything restarts
    for p in $(pgrep -f "frag_utils run-one|ipykernel_launcher" || true); do
      case "$(readlink "/proc/$p/cwd" 2> /dev/null)" in "$work"/*) kill -KILL "$p" || true ;; esac
    done
    wait "$pid" 2> /dev/null || true
    echo "   killed after $k s ($(ls -d papermill_runs/[0-9]*/"${profile}"* 2> /dev/null | wc -l) run folders so far)"
  else
    wait "$pid" || true
    echo "   the grid had finished before $k s: nothing was killed"
  fi
done
echo "== resumed ($(date -u +%T))"
make reproduce PROFILE="$profile" JOBS="$jobs" > "$work/resumed.log" 2>&1
.venv/bin/python "$repo/scripts/compare_records.py" "$work/reference/papermill_runs" papermill_runs --profile "$profile"
echo "(work folder: $work)"
