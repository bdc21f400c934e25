#!/usr/bin/env bash
# Asks a chat question through an OpenAI-compatible API with curl, streaming (server-sent
# events), and prints the answer's text as it arrives; what deploy/demo.sh does with the
# cluster's `openai api at` URL.
#
#   deploy/openai-ask.sh BASE_URL "question" [MAX_TOKENS]    e.g. BASE_URL=http://127.0.0.1:8000/v1
#
# Greedy (temperature 0), like `tandem generate`. Exit 1 when the server answers with an error.
set -euo pipefail
[ $# -ge 2 ] && [ $# -le 3 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
url=$1 question=$2 max_tokens=${3:-128}

body=$(python3 -c 'import json, sys
print(json.dumps({"messages": [{"role": "user", "content": sys.argv[1]}],
                  "max_tokens": int(sys.argv[2]), "temperature": 0, "stream": True}))' \
  "$question" "$max_tokens")
# Each `data: {chunk}` line carries a piece of the answer; `data: [DONE]` ends the stream; an
# error (HTTP status >= 400, or an error event mid-stream) is printed and fails.
curl -sS -N --fail-with-body "$url/chat/completions" -H "Content-Type: application/json" \
  -d "$body" | python3 -u -c 'import json, sys
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("data: "):
        if line:
            sys.exit("openai-ask.sh: server answered: " + line)
        continue
    data = line[len("data: "):]
    if data == "[DONE]":
        print()
        sys.exit(0)
    chunk = json.loads(data)
    if "error" in chunk:
        sys.exit("openai-ask.sh: error: " + chunk["error"]["message"])
    for choice in chunk["choices"]:
        print(choice["delta"].get("content") or "", end="", flush=True)
sys.exit("openai-ask.sh: the stream ended without data: [DONE]")'
