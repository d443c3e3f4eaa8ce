#!/usr/bin/env bash
# Runs a command with its memory capped, the page cache it fills included:
# a cgroup of its own (v2: memory.max; v1: memory.limit_in_bytes), made for
# the command and removed after it. Needs root on Linux.
#
#   scripts/memcap.sh BYTES COMMAND [ARGS...]
#
# Why: a scaled-down table fits in the page cache, a real one does not. A
# reader that leans on the page cache (a mapping with the kernel's
# readahead) then looks better on the scaled table than it would on the
# real one. Capping the bench's memory at a fraction of the scaled table
# keeps the fraction of the table the page cache can hold near the real
# one's. A cap below a reader's readahead working set makes it thrash,
# which the real table, with a page cache as many times larger, would not:
# docs/log/2026-12-03-memcap.md measured both.
# Exits with the command's status, or 2 when no cgroup can be made.
set -euo pipefail
bytes=${1:?usage: memcap.sh BYTES COMMAND [ARGS...]}
shift
[ $# -gt 0 ] || { echo "memcap: no command" >&2; exit 2; }
case $bytes in
    *[!0-9]*|'') echo "memcap: BYTES must be a whole number of bytes, not $bytes" >&2; exit 2 ;;
esac
name=engram-memcap-$$
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    root=/sys/fs/cgroup
    limit=memory.max
    if ! grep -qw memory "$root/cgroup.subtree_control"; then
        echo +memory > "$root/cgroup.subtree_control" ||
            { echo "memcap: cannot enable the memory controller in $root" >&2; exit 2; }
    fi
elif [ -d /sys/fs/cgroup/memory ]; then
    root=/sys/fs/cgroup/memory
    limit=memory.limit_in_bytes
else
    echo "memcap: no cgroup memory controller under /sys/fs/cgroup" >&2
    exit 2
fi
dir=$root/$name
mkdir "$dir" || { echo "memcap: cannot make $dir" >&2; exit 2; }
trap 'rmdir "$dir" 2>/dev/null || true' EXIT
echo "$bytes" > "$dir/$limit" || { echo "memcap: cannot set $dir/$limit" >&2; exit 2; }
echo "memcap: $* under $dir, $limit = $bytes" >&2
status=0
# The child joins the cgroup and becomes the command; this shell stays
# outside, so it can remove the cgroup once the command is done.
bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$dir" "$@" || status=$?
exit "$status"
