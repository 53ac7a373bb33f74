#!/bin/sh
# Builds a repository whose last writer was killed half-way through a commit on branch
# `trunk`: HEAD.lock, a half-written index.lock and a half-written ref lock stay behind.
# Usage: killed_writer_left_head_index_and_branch_locks.sh DIR   (DIR must not exist)
set -e
git init -q -b trunk "$1"
cd "$1"
printf 'KERNEL_KIND = "softmax"\n' > kernel.py
git add kernel.py
git -c user.name=case -c user.email=case@example.invalid commit -q -m "first kernel"
# what the killed commit had written so far: an index header, half a hash, half a ref
printf 'DIRC\000\000\000\002' > .git/index.lock
git rev-parse HEAD | cut -c1-20 > .git/refs/heads/trunk.lock
printf 'ref: refs/heads/tr' > .git/HEAD.lock
