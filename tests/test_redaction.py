"""Secrets kept out of what judgebias shows (judgebias.redaction)."""

from __future__ import annotations

import pytest

from judgebias.redaction import redact_uri, secret_name, uri_without_credentials


@pytest.mark.parametrize(("uri", "shown"), [
    # The password goes, the user and the server stay: the reader still knows where the runs are.
    ("postgresql://mlflow:hunter2@db.internal:5432/mlflow", "postgresql://mlflow:***@db.internal:5432/mlflow"),
    ("https://alice:s3cret@mlflow.example.com/prefix", "https://alice:***@mlflow.example.com/prefix"),
    # A user name alone is no secret; a token in the query is.
    ("https://alice@mlflow.example.com", "https://alice@mlflow.example.com"),
    ("https://mlflow.example.com/?token=abc&x=1", "https://mlflow.example.com/?token=***&x=1"),
    # Nothing to hide: unchanged, byte for byte.
    ("sqlite:////home/u/mlflow.db", "sqlite:////home/u/mlflow.db"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ("databricks", "databricks"),
])
def test_uris_are_shown_without_their_secrets(uri, shown):
    assert redact_uri(uri) == shown


def test_links_hold_no_credentials_at_all():
    assert uri_without_credentials("https://alice:s3cret@mlflow.example.com:8443/p?token=abc") == \
        "https://mlflow.example.com:8443/p"
    assert uri_without_credentials("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_secret_names():
    assert all(map(secret_name, ["OPENAI_API_KEY", "api-key", "auth_token", "HF_TOKEN", "accessToken",
                                 "Password", "authorization", "client_secret"]))
    # Settings that count tokens are not secrets: the run's params keep them.
    assert not any(map(secret_name, ["judge", "prompt", "p_a", "tokens_per_s", "judges.0.max_new_tokens",
                                     "tokenizer"]))


def test_a_label_studio_url_with_a_password_is_shown_and_recorded_without_it():
    # The client's URL is what messages, the ledger's server column and MLflow params carry.
    from judgebias.annotation.labelstudio import LabelStudioClient, LabelStudioError, ServerSettings

    client = LabelStudioClient(ServerSettings("http://ann:s3cr3t@127.0.0.1:9", "key"), timeout=2)
    assert client.url == "http://ann:***@127.0.0.1:9" and "s3cr3t" not in repr(client)
    with pytest.raises(LabelStudioError) as err:  # nothing listens on port 9: the message names the server
        client.check()
    assert "ann:***@127.0.0.1:9" in str(err.value) and "s3cr3t" not in str(err.value)
