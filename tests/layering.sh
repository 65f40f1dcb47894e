#!/bin/bash
# layering.sh SRCDIR NAME:ALLOWED... - every #include "X/..." in folder NAME
# (or a folder inside it) names NAME itself or one of the folders it may use
# (meson.build's `layers`); prints each violation.
set -u
src=$1
shift
bad=0
for rule in "$@"; do
    name=${rule%%:*}
    allowed=" $name ${rule#*:} "
    while IFS=: read -r file line inc; do
        dir=$(echo "$inc" | sed -n 's/.*#include "\([a-z_]*\)\/.*/\1/p')
        [ -z "$dir" ] && continue
        [ "$dir" = gp_config.h ] && continue
        case "$allowed" in
        *" $dir "*) ;;
        *) echo "FAIL: $file:$line includes $dir/, which $name may not use (allowed:$allowed)"; bad=$((bad + 1)) ;;
        esac
    done < <(cd "$src" && grep -Hn '#include "' "$name"/*.c "$name"/*.h "$name"/*/*.c "$name"/*/*.h 2>/dev/null)
done
echo "layering: $bad violations"
[ $bad = 0 ]
