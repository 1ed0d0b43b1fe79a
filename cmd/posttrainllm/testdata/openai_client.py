"""Drives `posttrainllm serve` with the official openai Python client, as a
user's program would, and checks what it gets back.

  openai_client.py BASE_URL MODEL CHAT_REFERENCE COMPLETION_PROMPT COMPLETION_REFERENCE

CHAT_REFERENCE is what `sample --chat QUESTION --temperature 0 --tokens 12`
printed (without its newline); COMPLETION_REFERENCE what `sample --prompt
COMPLETION_PROMPT --temperature 0 --tokens 12` printed: the prompt and its
continuation. Prints one line per check; exits 1 at the first failure.
"""

import concurrent.futures
import json
import sys
import urllib.error
import urllib.request

from openai import OpenAI

QUESTION = "Good morrow"
TOKENS = 12


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(ok, msg):
    if not ok:
        fail(msg)
    print("ok:", msg)


def chat(client, model, content, stream, **kw):
    """A chat completion's text and finish reason, streamed or not."""
    msgs = [{"role": "user", "content": content}]
    if not stream:
        r = client.chat.completions.create(model=model, messages=msgs, max_tokens=TOKENS, **kw)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage
    text, finish = "", None
    for chunk in client.chat.completions.create(model=model, messages=msgs, max_tokens=TOKENS, stream=True, **kw):
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, finish, None


def complete(client, model, prompt, stream, **kw):
    """A completion's text and finish reason, streamed or not."""
    if not stream:
        r = client.completions.create(model=model, prompt=prompt, max_tokens=TOKENS, **kw)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage
    text, finish = "", None
    for chunk in client.completions.create(model=model, prompt=prompt, max_tokens=TOKENS, stream=True, **kw):
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
    return text, finish, None


def raw_post(base, path, body, content_type="application/json"):
    """Status and decoded JSON body of a raw POST (for malformed requests)."""
    req = urllib.request.Request(base + path, data=body, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    base, model, chat_ref, prompt, completion_ref = sys.argv[1:6]
    client = OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=300)

    ids = [m.id for m in client.models.list().data]
    check(ids == [model], f"models.list() = {ids}")

    text, finish, usage = chat(client, model, QUESTION, False, temperature=0)
    check(text == chat_ref, f"chat at temperature 0 = sample --chat: {text!r} vs {chat_ref!r}")
    check(finish in ("stop", "length") and usage.completion_tokens <= TOKENS and usage.prompt_tokens > 0,
          f"chat finish {finish}, usage {usage}")
    streamed, sfinish, _ = chat(client, model, QUESTION, True, temperature=0)
    check(streamed == text and sfinish == finish, f"streamed chat = whole chat: {streamed!r} ({sfinish})")

    text, finish, usage = complete(client, model, prompt, False, temperature=0)
    check(completion_ref.startswith(prompt + text) and (finish != "length" or completion_ref == prompt + text),
          f"completion at temperature 0 continues as sample --prompt: {text!r} ({finish}) vs {completion_ref!r}")
    streamed, sfinish, _ = complete(client, model, prompt, True, temperature=0)
    check(streamed == text and sfinish == finish, f"streamed completion = whole completion: {streamed!r}")

    stop = text[len(text) // 2 : len(text) // 2 + 2]
    if stop.strip():
        cut, cfinish, _ = complete(client, model, prompt, False, temperature=0, stop=[stop])
        check(cut == text[: text.index(stop)] and cfinish == "stop", f"stop {stop!r} cuts {text!r} to {cut!r}")

    # Eight clients at once, each with its own question and seed, get what
    # each gets alone: requests never share a cache or a random stream.
    jobs = [(f"{QUESTION}, friend {i}", dict(temperature=0.9, seed=100 + i) if i % 2 else dict(temperature=0)) for i in range(8)]
    alone = [chat(client, model, q, False, **kw)[0] for q, kw in jobs]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda j: chat(client, model, j[0], j[1].get("temperature") == 0, **j[1])[0], jobs))
    check(together == alone, f"8 concurrent clients get their answers alone: {together} vs {alone}")

    malformed = [
        (b'{"model": "' + model.encode() + b'", "messages": [', "application/json"),
        (b"not json at all", "application/json"),
        (json.dumps({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}).encode(), None),
        (json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}).encode(), None),
        (json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10**9}).encode(), None),
        (json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}).encode(), None),
        (json.dumps({"model": model, "messages": [{"role": "pirate", "content": "hi"}]}).encode(), None),
        (json.dumps({"model": model, "messages": []}).encode(), None),
        (json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "temperature": -1}).encode(), None),
        (json.dumps({"model": model, "messages": [{"role": "user", "content": "x" * (5 << 20)}]}).encode(), None),
    ]
    for body, ctype in malformed:
        status, out = raw_post(base, "/v1/chat/completions", body, ctype or "application/json")
        err = out.get("error") if isinstance(out, dict) else None
        # An unknown model is 404 model_not_found, as OpenAI answers it.
        want = (404,) if b"no-such-model" in body else (400, 413)
        check(status in want and isinstance(err, dict) and err.get("message") and err.get("type"),
              f"malformed request ({body[:60]!r}...) answered {status} {str(err)[:100]}")
    text, _, _ = chat(client, model, QUESTION, False, temperature=0)
    check(text == chat_ref, "the server still answers after the malformed requests")
    print("all checks passed")


if __name__ == "__main__":
    main()
