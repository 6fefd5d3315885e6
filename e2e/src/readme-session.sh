# Sourced before the README's first session (readme-session.test.ts): records each answer and fills
# each `export VAR=prefix...` placeholder from the answer it follows, as a reader copies it: the
# last answer for one placeholder, the last two for two. API is the stack's REST address.
set -euo pipefail
answers=()
curl() { local out; out=$(command curl -sS "$@"); answers+=("$out"); printf '%s\n' "$out"; }
pnpm() { local out; out=$(command pnpm "$@"); answers+=("$out"); printf '%s\n' "$out"; }
export() {
  local count=$# i=0 arg name value
  for arg in "$@"; do
    name=${arg%%=*} value=${arg#*=}
    if [[ $name == API ]]; then
      value=$SESSION_API
    elif [[ $value == *... ]]; then
      value=$(node -e '
        const [prefix, answer] = process.argv.slice(1);
        const o = JSON.parse(answer);
        // Where the README says each id is: the account'"'"'s api_key, an entity'"'"'s, a transfer'"'"'s group.
        const id = { "lsk_": o.api_key, "ent_": o.entity?.entity_id, "trx-grp_": o.transaction_group_id }[prefix];
        if (typeof id !== "string" || !id.startsWith(prefix)) { console.error(`no ${prefix} id in ${answer}`); process.exit(1); }
        console.log(id);' "${value%...}" "${answers[${#answers[@]} - count + i]}")
    fi
    builtin export "$name=$value"
    i=$((i + 1))
  done
}
