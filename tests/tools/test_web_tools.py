"""web_search providers (Brave, Tavily) and browse, against a fake web on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest
from fake_web import ARTICLE, ARTICLE_TEXT, BOILERPLATE, KEY, FakeWeb

from agentic_rl.retrieval.web_search import BraveSearch, TavilySearch, WebSearchError, make_provider
from agentic_rl.tools import addresses
from agentic_rl.tools.browse import PageReader, extract_main_text, pinned_request
from agentic_rl.tools.web import WebConfig, WebTools
from agentic_rl.tools.web_policy import DomainPolicy, Target, URLRefused
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


# --------------------------------------------------------------------------- pinned connections

PUBLIC = "93.184.216.34"


@pytest.fixture
def rebinding_dns(monkeypatch, web):
    """A resolver that answers PUBLIC for a ``*.test`` name the first time it is asked and
    127.0.0.1 after (DNS rebinding), and a network where PUBLIC is the fake web. Yields
    ``(asked, connected)``: the names resolved, and the addresses TCP connections went to."""
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.create_connection
    asked: list[str] = []
    connected: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".test"):
            asked.append(host)
            host = PUBLIC if asked.count(host) == 1 else "127.0.0.1"
        return real_getaddrinfo(host, port, *args, **kwargs)

    def create_connection(address, *args, **kwargs):
        host, port = address[:2]
        ip = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0]  # as the real one resolves a name
        connected.append(ip)
        return real_connect(("127.0.0.1" if ip == PUBLIC else ip, port), *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    return asked, connected


def test_browse_connects_to_the_address_it_checked(web, rebinding_dns):
    asked, connected = rebinding_dns
    port = web.url.rsplit(":", 1)[1]
    tools = tools_for(web, allow_private_addresses=False)
    before = len(web.requests)
    result = call(tools, "browse", url=f"http://rebind.test:{port}/article")
    # One resolution (public: allowed); the connection went to that address, not to the
    # second answer (127.0.0.1), and the request still named the host.
    assert result.ok and f"URL: http://rebind.test:{port}/article" in result.content
    assert asked == ["rebind.test"] and connected == [PUBLIC]
    assert [r["headers"]["Host"] for r in web.requests[before:]] == [f"rebind.test:{port}"]


def test_redirect_hops_are_pinned_and_checked(web, rebinding_dns):
    asked, connected = rebinding_dns
    port = web.url.rsplit(":", 1)[1]
    tools = tools_for(web, allow_private_addresses=False)
    before = len(web.requests)
    result = call(tools, "browse", url=f"http://start.test:{port}/redirect?to=http://hop.test:{port}/plain")
    assert result.ok and result.content == f"URL: http://hop.test:{port}/plain\n\nPlain facts: the sky is blue."
    assert asked == ["start.test", "hop.test"] and connected == [PUBLIC, PUBLIC]
    assert [r["headers"]["Host"] for r in web.requests[before:]] == [f"start.test:{port}", f"hop.test:{port}"]
    # A hop to a private address, in any form, is refused before any connection.
    privates = ("http://127.0.0.1/", "http://[::ffff:127.0.0.1]/", "http://[64:ff9b::7f00:1]/", "http://[::127.0.0.1]/")
    for index, private in enumerate(privates):
        connected.clear()
        refused = call(tools, "browse", url=f"http://hop{index}.test:{port}/redirect?to={private}")
        assert refused.content.endswith("is a private or local address; only public web pages can be opened")
        assert f"the host {private.split('/')[2].strip('[]')} is" in refused.content and connected == [PUBLIC]


def test_a_name_with_any_private_address_is_refused(web, monkeypatch):
    connected = []
    monkeypatch.setattr(addresses, "resolve_host", lambda host: [PUBLIC, "127.0.0.1"])
    monkeypatch.setattr(socket, "create_connection", lambda address, *a, **k: connected.append(address))
    result = call(tools_for(web, allow_private_addresses=False), "browse", url="http://mixed.test/article")
    assert result.content == (
        "Error: URLRefused: the host mixed.test is a private or local address; only public web pages can be opened"
    )
    assert connected == []


def test_pinned_https_request_keeps_host_and_server_name():
    client = httpx.Client()
    target = Target("https://Bücher.example:8443/a?b=1", "bücher.example", ("2606:4700::1",))
    request = pinned_request(client, target, "2606:4700::1")
    assert str(request.url) == "https://[2606:4700::1]:8443/a?b=1"
    assert request.headers["Host"] == "xn--bcher-kva.example:8443"
    assert request.extensions["sni_hostname"] == "xn--bcher-kva.example"
    plain = pinned_request(client, Target("http://example.org/", "example.org", (PUBLIC,)), PUBLIC)
    assert str(plain.url) == f"http://{PUBLIC}/" and "sni_hostname" not in plain.extensions


def test_pinned_https_checks_the_certificate_against_the_host(tmp_path):
    """A real TLS handshake to 127.0.0.1: the server sees the URL's host as SNI, and the
    certificate (for secure.test only) is accepted for secure.test and refused for another name."""
    cert, key = _self_signed(tmp_path, "secure.test")
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    names: list[str | None] = []
    server_context.sni_callback = lambda sock, name, context: names.append(name)
    server = HTTPServer(("127.0.0.1", 0), _Hello)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        client = httpx.Client(verify=ssl.create_default_context(cafile=str(cert)), timeout=5.0)
        target = Target(f"https://secure.test:{port}/", "secure.test", ("127.0.0.1",))
        response = client.send(pinned_request(client, target, "127.0.0.1"))
        assert response.status_code == 200 and response.text == "Host: secure.test:" + str(port)
        assert names == ["secure.test"]
        other = Target(f"https://other.test:{port}/", "other.test", ("127.0.0.1",))
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            client.send(pinned_request(client, other, "127.0.0.1"))
    finally:
        server.shutdown()
        server.server_close()


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"Host: {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def _self_signed(directory, name: str):
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path
