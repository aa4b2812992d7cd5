from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import ConfigError, load_config, parse_config

MINIMAL = {
    "pools": {"pd": {"urls": ["http://127.0.0.1:8000/pd/"]}},
    "models": {"m": {"pool": "pd"}},
}


def test_minimal_config_gets_defaults_and_trims_urls() -> None:
    cfg = parse_config(MINIMAL, env={})
    assert cfg.pools["pd"].urls == ("http://127.0.0.1:8000/pd",)
    assert cfg.pools["pd"].timeouts.idle == 60.0
    assert cfg.server.port == 8080


def test_unknown_key_names_its_path() -> None:
    doc = {**MINIMAL, "pools": {"pd": {"urls": ["http://x:1"], "timeouts": {"idel": 3}}}}
    with pytest.raises(
        ConfigError, match=r"pools\.pd\.timeouts\.idel: unknown key \(did you mean 'idle'\?\)"
    ):
        parse_config(doc, env={})


def test_model_naming_an_unknown_pool_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"models\.m\.pool: unknown pool 'nope'"):
        parse_config({**MINIMAL, "models": {"m": {"pool": "nope"}}}, env={})


def test_bad_url_and_bad_number_are_reported_together() -> None:
    doc = {
        "server": {"port": 70000},
        "pools": {"pd": {"urls": ["ftp://x"]}},
        "models": {"m": {"pool": "pd"}},
    }
    with pytest.raises(ConfigError) as err:
        parse_config(doc, env={})
    assert "server.port" in str(err.value)
    assert "pools.pd.urls" in str(err.value)


def test_config_is_frozen() -> None:
    cfg = parse_config(MINIMAL, env={})
    with pytest.raises(ValueError, match="frozen"):
        cfg.server.port = 1  # type: ignore[misc]


def test_environment_interpolation() -> None:
    doc = {
        "pools": {"pd": {"urls": ["http://${HOST}:${PORT:-8000}/pd"]}},
        "models": {"m": {"pool": "pd"}},
    }
    cfg = parse_config(doc, env={"HOST": "serve.local"})
    assert cfg.pools["pd"].urls == ("http://serve.local:8000/pd",)


def test_missing_environment_variable_names_the_key() -> None:
    doc = {"pools": {"pd": {"urls": ["http://${NOPE}/pd"]}}, "models": {"m": {"pool": "pd"}}}
    with pytest.raises(
        ConfigError, match=r"pools\.pd\.urls\[0\]: environment variable NOPE is not set"
    ):
        parse_config(doc, env={})


def test_load_config_reports_yaml_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("pools: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_check_config_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("pools: {pd: {urls: ['http://127.0.0.1:1']}}\nmodels: {m: {pool: pd}}\n")
    assert main(["check-config", str(good)]) == 0
    assert "OK" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "pools: {pd: {urls: ['http://127.0.0.1:1'], colour: red}}\nmodels: {m: {pool: pd}}\n"
    )
    assert main(["check-config", str(bad)]) == 1
    assert "pools.pd.colour" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["Authorization", "cookie", "Host", "api-key", "x-forwarded-for"])
def test_sensitive_headers_cannot_be_forwarded(name: str) -> None:
    document = {
        "pools": {"p": {"urls": ["http://127.0.0.1:1"], "forward_headers": ["x-ok", name]}},
        "models": {"m": {"pool": "p"}},
    }
    with pytest.raises(ConfigError, match=f"pools.p.forward_headers: .*{name.lower()} cannot be"):
        parse_config(document, env={})


def test_server_limits_are_strict_and_bounded() -> None:
    base = {"pools": {"p": {"urls": ["http://127.0.0.1:1"]}}, "models": {"m": {"pool": "p"}}}
    server = parse_config(base, env={}).server
    assert (server.max_header_bytes, server.max_headers, server.header_timeout) == (32768, 100, 10)
    with pytest.raises(ConfigError, match=r"server\.max_header_bytes"):
        parse_config({**base, "server": {"max_header_bytes": 10}}, env={})
    with pytest.raises(ConfigError, match=r"server\.header_timout"):
        parse_config({**base, "server": {"header_timout": 1}}, env={})


def test_several_workers_need_shared_limit_counters() -> None:
    # Each worker's in-process limiter counts alone: two workers would admit twice the limit.
    with pytest.raises(ConfigError, match=r"2 workers would each count rate limits alone"):
        parse_config({**MINIMAL, "server": {"workers": 2}}, env={})
    redis = {"backend": "redis", "redis_url": "redis://127.0.0.1:6379"}
    assert parse_config({**MINIMAL, "server": {"workers": 2}, "limits": redis}, env={})
    # Nothing can be limited: no keys, no default limits (or limits off).
    no_limits = {**MINIMAL, "server": {"workers": 2}, "auth": {"enabled": False}}
    assert parse_config(no_limits, env={})
    assert parse_config({**MINIMAL, "server": {"workers": 2}, "limits": {"enabled": False}}, env={})


def test_run_refuses_a_workers_override_the_limiter_cannot_count(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("pools: {pd: {urls: ['http://127.0.0.1:8000']}}\nmodels: {m: {pool: pd}}\n")
    assert main(["run", "--config", str(path), "--workers", "2"]) == 2
