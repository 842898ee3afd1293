#!/bin/sh
# check_spec_refs.sh SRC_DIR — every "SPEC §n" cited in the sources, tests, tools and docs names
# a section that exists in docs/SPEC.md ("## §n ..."), and the README points to docs/SPEC.md,
# not to a contract outside the repository. Prints each dangling citation with its file:line.
set -eu
src=${1:?usage: check_spec_refs.sh SRC_DIR}
spec="$src/docs/SPEC.md"
[ -f "$spec" ] || { echo "missing $spec"; exit 1; }
sections=$(sed -n 's/^## \(§[0-9][0-9]*a\{0,1\}\) .*/\1/p' "$spec")
[ -n "$sections" ] || { echo "$spec has no '## §n' sections"; exit 1; }
bad=0
n=0
# every line that cites SPEC; each § token on it must be a section
lines=$(cd "$src" && grep -rnI "SPEC" include src tools tests bench fuzz docs README.md \
        --exclude=SPEC.md --exclude=check_spec_refs.sh || true)
IFS='
'
for l in $lines; do
    loc=${l%%:[!0-9]*}
    for ref in $(printf '%s\n' "$l" | grep -o '§[0-9][0-9]*a\{0,1\}'); do
        n=$((n + 1))
        ok=0
        for s in $sections; do [ "$s" = "$ref" ] && ok=1; done
        if [ $ok = 0 ]; then echo "dangling $ref at $loc"; bad=1; fi
    done
done
unset IFS
if grep -q "\.\./shared" "$src/README.md"; then echo "README.md points outside the repository (../shared)"; bad=1; fi
grep -q "docs/SPEC.md" "$src/README.md" || { echo "README.md does not point to docs/SPEC.md"; bad=1; }
[ $n -gt 0 ] || { echo "found no SPEC citations at all (is SRC_DIR right?)"; bad=1; }
echo "$n SPEC section citations checked against: $(echo $sections)"
exit $bad
