"""Path and URL checks (cudawatch.inputs) and the shared text helpers (cudawatch.text)."""

from __future__ import annotations

import duckdb
import pytest

from cudawatch import text
from cudawatch.config import AlertConfig, ConfigError
from cudawatch.inputs import InputError, existing_db, http_url, output_dir, output_file, shard_root, writable_db


def test_db_checks(tmp_path):
    good = tmp_path / "w.duckdb"
    duckdb.connect(str(good)).close()
    assert existing_db(good) == good and writable_db(good) == good
    (tmp_path / "notes.txt").write_text("hello, not a database\n")
    (tmp_path / "empty").write_bytes(b"")
    cases = {
        tmp_path / "typo.duckdb": "no such warehouse",
        tmp_path: "is a directory",
        tmp_path / "notes.txt": "not a DuckDB database file",
        tmp_path / "empty": "not a DuckDB database file",
    }
    for path, words in cases.items():
        with pytest.raises(InputError, match=words):
            existing_db(path)
    assert writable_db(tmp_path / "new.duckdb") == tmp_path / "new.duckdb"
    with pytest.raises(InputError, match="does not exist"):
        writable_db(tmp_path / "no" / "such" / "w.duckdb")
    with pytest.raises(InputError, match="is a directory"):
        writable_db(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "notes.txt", "w.duckdb"]


def test_folder_and_file_checks(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="no such folder"):
        shard_root(tmp_path / "does-not-exist")
    with pytest.raises(InputError, match="not a folder"):
        shard_root(tmp_path / "f")
    with pytest.raises(InputError, match="is a directory"):
        output_file(tmp_path)
    with pytest.raises(InputError, match="is a file, not a folder"):
        output_file(tmp_path / "f" / "report.html")
    with pytest.raises(InputError, match="is a file, not a folder"):
        output_dir(tmp_path / "f")
    assert output_dir(tmp_path / "new") == tmp_path / "new" and output_file(tmp_path / "r.html")


@pytest.mark.parametrize("url, words", [
    ("not-a-url", "http:// or https://"),
    ("http://h:abc", "bad port"),
    ("file:///etc/passwd", "got file://"),
    ("ftp://example.com/x", "got ftp://"),
    ("https://", "must name a host"),
    ("http:///path", "must name a host"),
])
def test_bad_urls(url, words):
    with pytest.raises(InputError, match=words) as exc:
        http_url("CUDAWATCH_WEBHOOK_URL", url)
    assert "CUDAWATCH_WEBHOOK_URL" in str(exc.value)
    if "://" in url and len(url) > 12:
        assert url not in str(exc.value)  # URLs may carry tokens: never echoed


def test_good_urls():
    assert http_url("X", " https://hooks.slack.com/services/T/B/xyz ") == "https://hooks.slack.com/services/T/B/xyz"
    assert http_url("X", "http://127.0.0.1:8080/hook") == "http://127.0.0.1:8080/hook"


@pytest.mark.parametrize("name", ["CUDAWATCH_WEBHOOK_URL", "CUDAWATCH_SLACK_WEBHOOK_URL"])
@pytest.mark.parametrize("url", ["not-a-url", "http://h:abc", "file:///etc/passwd", "ftp://x/y"])
def test_alert_config_refuses_bad_urls_at_start(name, url):
    with pytest.raises(ConfigError, match=name):
        AlertConfig.from_env({name: url})


def test_terminal_escapes_control_and_bidi():
    hostile = "evil\x1b[2J\x1b]0;pwn\x07kernel\u202eclé\u2066x\r\nend\x9b"
    out = text.terminal(hostile)
    assert out == "evil\\x1b[2J\\x1b]0;pwn\\x07kernel\\u202eclé\\u2066x\\x0d\\x0aend\\x9b"
    assert not any(ord(c) < 32 or 0x7f <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e for c in out)


def test_shorten_name_keeps_head_tail_and_id():
    long = "void at::native::elementwise_kernel<" + "x" * 300 + ">(int, Func)"
    a = text.shorten_name(long, "0123456789abcdef")
    b = text.shorten_name(long.replace("x" * 10, "y" * 10, 1), "fedcba9876543210")
    assert len(a) == text.NAME_LIMIT and a.startswith("void at::native::") and a.endswith("(int, Func) [0123456789abcdef]")
    assert a != b and "…" in a
    assert text.shorten_name("short_kernel", "0123456789abcdef") == "short_kernel"
    assert text.shorten_name("a\u202eb", None) == "ab"
