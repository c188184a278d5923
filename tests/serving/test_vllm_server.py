"""`vllm serve` on tpu: OpenAI completions and streamed chat, concurrent requests, the
Prometheus gauges a router scores endpoints on, vLLM's HTTP errors for bad input, structured
output and tool calls (named, required, and parsed by the Hermes parser), and a clean
shutdown. The server runs on a loopback port for the module; every wait is bounded."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from serving_helpers import MODEL, PROMPTS, REQUEST_TIMEOUT_S, VllmServer, cpu_greedy, served

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def server(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    with served(tiny_llama, tmp_path_factory.mktemp("server") / "serve.log") as instance:
        yield instance


@pytest.fixture(scope="module")
def expected(tiny_llama: Path) -> dict[str, str]:
    """Each prompt's greedy completion text from transformers on CPU."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    tokens = cpu_greedy(tiny_llama, PROMPTS, MAX_TOKENS)
    return {
        prompt: tokenizer.decode(ids, skip_special_tokens=True)
        for prompt, ids in zip(PROMPTS, tokens, strict=True)
    }


def _complete(server: VllmServer, prompt: str) -> str:
    status, body = server.post(
        "/v1/completions",
        {"model": MODEL, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0},
    )
    assert status == 200, body
    return str(json.loads(body)["choices"][0]["text"])


def test_completion_matches_transformers_on_cpu(
    server: VllmServer, expected: dict[str, str]
) -> None:
    assert _complete(server, PROMPTS[1]) == expected[PROMPTS[1]]


def test_a_repeated_request_compiles_nothing_on_the_server(
    server: VllmServer, expected: dict[str, str]
) -> None:
    _complete(server, PROMPTS[3])
    before = _counter(server, "torch_tpu:compiles")
    assert _complete(server, PROMPTS[3]) == expected[PROMPTS[3]]
    assert _counter(server, "torch_tpu:compiles") == before
    assert before > 0  # the gauge is live: the server compiled its first requests


def _streamed_chat(server: VllmServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a streamed chat completion of `body`, in order."""
    request = urllib.request.Request(
        server.url + "/v1/chat/completions",
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    chunks = []
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        for line in response:
            text = line.decode().strip()
            if text.startswith("data: ") and text != "data: [DONE]":
                chunks.append(json.loads(text[len("data: ") :]))
    return chunks


def _counter(server: VllmServer, name: str) -> int:
    status, body = server.post("/collective_rpc", {"method": "torch_tpu_metrics"})
    assert status == 200, body
    return int(json.loads(body)["results"][0][name.removeprefix("torch_tpu:")])


def test_streamed_chat_completion_assembles_the_greedy_reply(
    server: VllmServer, tiny_llama: Path
) -> None:
    from transformers import AutoTokenizer

    messages = [{"role": "user", "content": "the cache"}]
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama)
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    want = tokenizer.decode(cpu_greedy(tiny_llama, [prompt], 8)[0], skip_special_tokens=True)

    body = {"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0}
    chunks = _streamed_chat(server, body)
    pieces = [c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]]
    assert len(chunks) > 2, "the reply came in one piece, not streamed"
    assert "".join(pieces) == want


def test_eight_concurrent_requests_all_answered_while_metrics_show_the_load(
    server: VllmServer, expected: dict[str, str]
) -> None:
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(8)]
    gauges: list[dict[str, float]] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            gauges.append(_gauges(server.get("/metrics")[1]))
            time.sleep(0.05)

    def keep_busy() -> None:
        # Two long completions the checked ones batch with: without them the load can end
        # between two samples of /metrics.
        status, body = server.post(
            "/v1/completions",
            {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 200, "ignore_eos": True},
        )
        assert status == 200, body

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    try:
        with ThreadPoolExecutor(max_workers=10) as pool:
            busy = [pool.submit(keep_busy) for _ in range(2)]
            answers = list(pool.map(lambda p: _complete(server, p), prompts))
            for request in busy:
                request.result()
    finally:
        done.set()
        scraper.join(timeout=REQUEST_TIMEOUT_S)
    assert answers == [expected[p] for p in prompts]
    assert gauges, "no /metrics sample was taken during the load"
    assert max(g["vllm:num_requests_running"] for g in gauges) >= 2, "no batching seen"
    assert all(0.0 <= g["vllm:kv_cache_usage_perc"] <= 1.0 for g in gauges)
    assert max(g["vllm:kv_cache_usage_perc"] for g in gauges) > 0.0
    assert all(g["vllm:num_requests_waiting"] >= 0 for g in gauges)
    idle = _gauges(server.get("/metrics")[1])
    assert idle["vllm:num_requests_running"] == 0


def _gauges(text: str) -> dict[str, float]:
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    found = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0]
        if name in names:
            found[name] = float(line.rsplit(" ", 1)[1])
    assert set(found) == set(names), f"missing gauges: {set(names) - set(found)}"
    return found


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": "unknown", "prompt": "the", "max_tokens": 2}, 404),
        (b'{"model": "tiny", "prompt": ', 400),
        ({"model": MODEL, "prompt": "the " * 300, "max_tokens": 2}, 400),
    ],
    ids=["unknown-model", "malformed-json", "prompt-longer-than-context"],
)
def test_bad_requests_get_vllms_errors_and_the_server_keeps_serving(
    server: VllmServer, expected: dict[str, str], body: bytes | dict[str, Any], status: int
) -> None:
    got, text = server.post("/v1/completions", body)
    assert got == status, text
    assert "error" in json.loads(text)
    assert _complete(server, PROMPTS[0]) == expected[PROMPTS[0]]


def test_response_format_json_schema_gives_valid_json(server: VllmServer) -> None:
    import jsonschema

    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z ]{1,12}$"},
            "count": {"type": "integer", "minimum": 0, "maximum": 999},
        },
        "required": ["name", "count"],
        "additionalProperties": False,
    }
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "the cache"}],
        "max_tokens": 64,
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "record", "schema": schema},
        },
    }
    status, text = server.post("/v1/chat/completions", body)
    assert status == 200, text
    choice = json.loads(text)["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    jsonschema.validate(json.loads(choice["message"]["content"]), schema)


def test_choice_constrained_completion_is_one_of_the_choices(server: VllmServer) -> None:
    # vLLM 0.32 takes choices in `structured_outputs` (the `guided_choice` field is gone).
    choices = ["prefill", "decode", "sample"]
    for prompt in PROMPTS:
        status, text = server.post(
            "/v1/completions",
            {
                "model": MODEL,
                "prompt": prompt,
                "max_tokens": 8,
                "temperature": 0,
                "structured_outputs": {"choice": choices},
            },
        )
        assert status == 200, text
        assert json.loads(text)["choices"][0]["text"] in choices


WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "pattern": "^[a-z]{1,8}$"},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "the forecast for a city",
            "parameters": WEATHER_PARAMETERS,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
]


def _tools_body(**options: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "the weather in the cache"}],
        "max_tokens": 96,
        "temperature": 0,
        "tools": TOOLS,
        **options,
    }


def _chat_with_tools(server: VllmServer, **options: Any) -> dict[str, Any]:
    status, text = server.post("/v1/chat/completions", _tools_body(**options))
    assert status == 200, text
    return dict(json.loads(text)["choices"][0])


def _assert_weather_call(call: dict[str, Any]) -> None:
    import jsonschema

    assert call["type"] == "function" and call["id"]
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER_PARAMETERS)


@pytest.mark.parametrize(
    "tool_choice",
    [{"type": "function", "function": {"name": "get_weather"}}, "required"],
    ids=["named", "required"],
)
def test_tool_choice_gives_a_call_whose_arguments_fit_the_tools_schema(
    server: VllmServer, tool_choice: str | dict[str, Any]
) -> None:
    # vLLM constrains the reply to the tool's parameters (a named tool) or to a list of calls
    # of the given tools (required) with its structured-output backend, masked on tpu.
    choice = _chat_with_tools(server, tool_choice=tool_choice)
    calls = choice["message"]["tool_calls"]
    assert calls, choice
    for call in calls:
        if call["function"]["name"] == "get_time":
            assert tool_choice == "required" and json.loads(call["function"]["arguments"]) == {}
        else:
            _assert_weather_call(call)


# What a model trained for Hermes-style calls writes; a random model writes it when its reply is
# constrained to this pattern, so the parser's work on the reply is what is tested.
HERMES_CALL = (
    r'<tool_call>\{"name": "get_weather", "arguments": '
    r'\{"city": "[a-z]{1,8}", "days": [1-7]\}\}</tool_call>'
)


def test_auto_tool_choice_parses_the_models_hermes_call(server: VllmServer) -> None:
    choice = _chat_with_tools(server, tool_choice="auto", structured_outputs={"regex": HERMES_CALL})
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    _assert_weather_call(call)
    assert not choice["message"].get("content")


def test_streamed_auto_tool_call_assembles_the_same_call(server: VllmServer) -> None:
    options = {"tool_choice": "auto", "structured_outputs": {"regex": HERMES_CALL}}
    whole = _chat_with_tools(server, **options)["message"]["tool_calls"][0]["function"]
    name, arguments, finish = "", "", None
    for chunk in _streamed_chat(server, _tools_body(**options)):
        for choice in chunk["choices"]:
            finish = choice.get("finish_reason") or finish
            for delta in choice["delta"].get("tool_calls") or []:
                name += delta.get("function", {}).get("name") or ""
                arguments += delta.get("function", {}).get("arguments") or ""
    assert finish == "tool_calls"
    assert name == whole["name"]
    assert json.loads(arguments) == json.loads(whole["arguments"])


def test_server_shuts_down_cleanly_on_sigint(server: VllmServer) -> None:
    assert server.stop() == 0
    log = server.log.read_text()
    # The engine core drained and left by itself. (vLLM's API server may still log an
    # EngineDeadError from its output handler once the engine is gone: its shutdown order.)
    assert "EngineCore: request processing complete" in log
    for failure in ("Segfault", "Fatal Python error", "force killing", "exited unexpectedly"):
        assert failure not in log
