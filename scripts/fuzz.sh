#!/usr/bin/env bash
# Long fuzz runs of every input parser (stepscope_core::fuzz), not part of
# the test command: each target gets ITERATIONS executions (default 400,000,
# so 2.8 million in all) with a 2 GB address-space limit and a 5 s limit per
# execution. Inputs that panic or hang are kept in core/tests/fuzz/crashes/,
# which the test command replays.
#
#   bash scripts/fuzz.sh [ITERATIONS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
iterations="${1:-400000}"
seed="${2:-$(date +%s)}"
cargo build --quiet --release -p stepscope-core --example fuzz
status=0
for target in checkpoint experiment link csv text run json; do
    # The address-space limit applies to the fuzzer alone, not to cargo.
    (ulimit -v 2000000 && ./target/release/examples/fuzz "$target" "$iterations" "$seed") || status=1
done
exit "$status"
