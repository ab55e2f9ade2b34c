#!/bin/sh
# check-glibc.sh LIBRARY MAX: fails when LIBRARY needs a GLIBC_x.y symbol version above MAX
# (the library must load in old distributions' images too: docs/nvml.md).
set -eu
lib=$1
max=$2
need=$(objdump -T "$lib" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1)
newest=$(printf '%s\n%s\n' "$need" "$max" | sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1)
if [ "$newest" != "$max" ]; then
    echo "$lib needs GLIBC_$need (above GLIBC_$max):" >&2
    objdump -T "$lib" | grep "GLIBC_$need" >&2
    exit 1
fi
echo "$lib: highest GLIBC symbol version GLIBC_$need (<= $max)"
