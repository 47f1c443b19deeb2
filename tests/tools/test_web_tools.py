"""web_search providers (Brave, Tavily) and browse, against a fake web on 127.0.0.1."""

from __future__ import annotations

import json
import logging

import pytest
from fake_web import ARTICLE, ARTICLE_TEXT, BOILERPLATE, KEY, FakeWeb

from agentic_rl.retrieval.web_search import BraveSearch, TavilySearch, WebSearchError, make_provider
from agentic_rl.tools.browse import PageReader, extract_main_text
from agentic_rl.tools.web import WebConfig, WebTools
from agentic_rl.tools.web_policy import DomainPolicy, URLRefused
from agentic_rl.types import ToolCall


@pytest.fixture(scope="module")
def web():
    server = FakeWeb(slow_s=2.0).start()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", KEY)
    monkeypatch.setenv("TAVILY_API_KEY", KEY)


def tools_for(web, **overrides) -> WebTools:
    """Fresh (unshared) tools on the fake web: its search API and loopback pages allowed."""
    options = {"provider": "brave", "base_url": web.url, "allow_private_addresses": True, "timeout_s": 5.0, **overrides}
    return WebTools(WebConfig(**options))


def call(tools: WebTools, name: str, **arguments):
    registry = {t.name: t for t in tools.tools}
    return registry[name].invoke(ToolCall(name=name, arguments=arguments, id="call_0"))


# --------------------------------------------------------------------------- providers


def test_brave_request_shape_and_parsing(web):
    provider = BraveSearch(base_url=web.url)
    before = len(web.requests)
    docs = provider.search("Vexora Dynamics founder", 2)
    request = web.requests[before]
    assert request["method"] == "GET" and request["path"] == "/res/v1/web/search"
    assert request["query"] == {"q": ["Vexora Dynamics founder"], "count": ["2"]}
    assert request["headers"]["X-Subscription-Token"] == KEY
    assert request["headers"]["Accept"] == "application/json"
    assert [(d.id, d.title) for d in docs] == [
        (f"{web.url}/article", "Vexora Dynamics - Example Wiki"),
        ("https://answers.denied.test/vexora", "Vexora answers leaked"),
    ]
    assert docs[0].text == "Vexora Dynamics is an aerospace company founded in 1987 by Ilsa Marrow."


def test_tavily_request_shape_and_parsing(web):
    provider = TavilySearch(base_url=web.url)
    before = len(web.requests)
    docs = provider.search("Quenport", 3)
    request = web.requests[before]
    assert request["method"] == "POST" and request["path"] == "/search"
    assert json.loads(request["body"]) == {"query": "Quenport", "max_results": 3}
    assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    assert KEY.encode() not in request["body"]  # the key travels in the header only
    assert [d.id for d in docs] == [
        f"{web.url}/article",
        "https://answers.denied.test/vexora",
        "https://travel.example.org/quenport",
    ]
    assert docs[2].text == "Things to do in Quenport." and docs[0].score == pytest.approx(0.9)


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("BRAVE_API_KEY")
    with pytest.raises(ValueError, match="the environment variable BRAVE_API_KEY is not set"):
        make_provider("brave")
    monkeypatch.setenv("MY_TAVILY", "x")
    assert make_provider("tavily", api_key_env="MY_TAVILY").key_env == "MY_TAVILY"
    with pytest.raises(ValueError, match="provider: expected one of brave, tavily, got 'bing'"):
        make_provider("bing")


@pytest.mark.parametrize("provider", ["brave", "tavily"])
def test_key_never_in_errors_repr_or_logs(web, monkeypatch, caplog, provider):
    wrong = "sk-wrong-0123456789abcdef"
    monkeypatch.setenv("WRONG_KEY", wrong)
    client = make_provider(provider, base_url=web.url, api_key_env="WRONG_KEY")
    caplog.set_level(logging.DEBUG)  # httpx / httpcore debug logs included
    with pytest.raises(WebSearchError) as error:
        client.search("Vexora", 2)
    # The fake server echoes the wrong key in its 401 body: the message shows *** instead.
    assert "answered HTTP 401" in str(error.value) and "***" in str(error.value)
    assert wrong not in str(error.value) and wrong not in repr(client)
    assert caplog.records and not any(wrong in record.getMessage() for record in caplog.records)


# --------------------------------------------------------------------------- web_search tool


def test_web_search_formats_results_and_hides_denied_domains(web):
    tools = tools_for(web, deny_domains=["denied.test"], top_k=3)
    result = call(tools, "web_search", query="Vexora Dynamics")
    assert result.ok
    assert result.content == (
        f"[1] Vexora Dynamics - Example Wiki\nURL: {web.url}/article\nVexora Dynamics is an aerospace company founded in 1987 by Ilsa Marrow."
        "\n\n[2] Quenport travel guide\nURL: https://travel.example.org/quenport\nThings to do in Quenport."
    )


def test_web_search_is_cached(web):
    tools = tools_for(web)
    before = web.count("/res/v1/web/search")
    first = call(tools, "web_search", query="cache me")
    second = call(tools, "web_search", query="cache me")
    assert first.content == second.content
    assert web.count("/res/v1/web/search") == before + 1  # the second call sent no request


def test_search_timeout_is_an_error_observation(web):
    tools = tools_for(web, timeout_s=0.3)
    result = call(tools, "web_search", query="slow")
    assert not result.ok and not result.malformed
    assert result.content == "Error: WebSearchError: the brave search API did not answer within 0.3 s"


def test_empty_query_is_refused(web):
    result = call(tools_for(web), "web_search", query="  ")
    assert not result.ok and "the query is empty" in result.content


# --------------------------------------------------------------------------- browse


def test_browse_extracts_the_article_not_the_boilerplate(web):
    result = call(tools_for(web), "browse", url=f"{web.url}/article")
    assert result.ok
    assert result.content.startswith(f"Title: Vexora Dynamics\nURL: {web.url}/article\n\nVexora Dynamics\n")
    assert ARTICLE_TEXT in result.content and "headquarters to Dravenholt in 2004" in result.content
    for junk in BOILERPLATE:
        assert junk not in result.content


def test_extract_main_text_directly():
    title, text = extract_main_text(ARTICLE)
    assert title == "Vexora Dynamics" and text.startswith("Vexora Dynamics\n" + ARTICLE_TEXT)
    assert extract_main_text("<html><body><p>Just one line.</p></body></html>")[1] == "Just one line."


def test_browse_is_cached(web):
    tools = tools_for(web)
    before = web.count("/article")
    first = call(tools, "browse", url=f"{web.url}/article")
    second = call(tools, "browse", url=f"{web.url}/article")
    assert first.content == second.content and web.count("/article") == before + 1
    assert tools.reader.cache_hits == 1


def test_browse_timeout_is_an_error_observation(web):
    result = call(tools_for(web, timeout_s=0.3), "browse", url=f"{web.url}/slow")
    assert not result.ok and result.content == "Error: BrowseError: the page did not load within 0.3 s"


def test_browse_caps_bytes_and_characters(web):
    tools = tools_for(web, max_bytes=100_000, max_chars=2_000)
    page = tools.reader.read(f"{web.url}/big")
    assert page.cut_at_bytes == 100_000
    assert 50_000 < len(page.text) < 100_000  # the text of the first 100 kB, not of all 3 MB
    result = call(tools, "browse", url=f"{web.url}/big")
    body = result.content.split("\n\n", 1)[1]
    text, notes = body.rsplit("\n[showing", 1)
    assert len(text) <= 2_000 and text.startswith("Filler text number 1 about Quenport")
    assert (
        notes
        == f" the first 2000 of {len(page.text)} characters]\n[the page is longer than 100000 bytes; read up to there]"
    )


def test_deny_list_refuses_with_a_clear_message(web):
    tools = tools_for(web, deny_domains=["denied.test"])
    result = call(tools, "browse", url="https://answers.denied.test/vexora")
    assert not result.ok
    assert (
        result.content
        == "Error: URLRefused: the domain answers.denied.test is blocked here (deny list: denied.test); use another source"
    )
    # A redirect into a denied domain is refused too (each hop is checked).
    redirected = call(tools, "browse", url=f"{web.url}/to-denied")
    assert not redirected.ok and "answers.denied.test is blocked here" in redirected.content
    followed = call(tools, "browse", url=f"{web.url}/to-article")
    assert followed.ok and f"URL: {web.url}/article" in followed.content


def test_allow_list_and_private_addresses(web):
    allow = tools_for(web, allow_domains=["example.org"])
    result = call(allow, "browse", url=f"{web.url}/article")
    assert result.content == "Error: URLRefused: the domain 127.0.0.1 is not on the allow list (example.org)"
    public_only = WebTools(WebConfig(base_url=web.url))  # allow_private_addresses off (the default)
    result = call(public_only, "browse", url=f"{web.url}/article")
    assert (
        result.content
        == "Error: URLRefused: the host 127.0.0.1 is a private or local address; only public web pages can be opened"
    )
    for url in ("file:///etc/passwd", "ftp://example.org/x", "http://169.254.169.254/latest/meta-data"):
        assert not call(public_only, "browse", url=url).ok


def test_browse_unreadable_pages(web):
    tools = tools_for(web)
    assert (
        call(tools, "browse", url=f"{web.url}/file.pdf").content
        == "Error: BrowseError: cannot read application/pdf content; only HTML and plain-text pages can be read"
    )
    assert (
        call(tools, "browse", url=f"{web.url}/missing").content
        == "Error: BrowseError: the page answered HTTP 404 (Not Found)"
    )
    plain = call(tools, "browse", url=f"{web.url}/plain")
    assert plain.ok and plain.content == f"URL: {web.url}/plain\n\nPlain facts: the sky is blue."


# --------------------------------------------------------------------------- policy and config


def test_domain_policy_matches_subdomains_only():
    policy = DomainPolicy(allow_domains=["example.org"], deny_domains=["secret.example.org"])
    assert policy.host_allowed("example.org") and policy.host_allowed("en.example.org")
    assert not policy.host_allowed("badexample.org") and not policy.host_allowed("a.secret.example.org")
    with pytest.raises(URLRefused, match="only http:// and https://"):
        policy.check("javascript:alert(1)")
    with pytest.raises(ValueError, match="deny_domains: expected a list of domain names, got the string"):
        DomainPolicy(deny_domains="example.org")


def test_web_config_validation():
    assert WebConfig.parse({"provider": "tavily", "deny_domains": ["a.org"]}) == WebConfig(
        provider="tavily", deny_domains=("a.org",)
    )
    with pytest.raises(ValueError, match="web: unknown key 'api_key'.*api_key_env names the variable"):
        WebConfig.parse({"api_key": "sk-1"})
    with pytest.raises(ValueError, match="web.max_chars: expected a positive int, got 0"):
        WebConfig(max_chars=0)
    with pytest.raises(ValueError, match="web.provider: expected one of brave, tavily"):
        WebConfig.parse("google")
    with pytest.raises(ValueError, match="max_bytes: expected an int >= 1"):
        PageReader(max_bytes=0)
