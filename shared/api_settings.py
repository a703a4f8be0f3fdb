"""The HTTP API's settings (``NEWSMON_API__*``), a section of :class:`newsmon.shared.config.Settings`."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr

__all__ = ["ApiSettings"]


class ApiSettings(BaseModel):
    """The HTTP API (`newsmon serve`): proposals on request and label management for the moderation tool."""

    host: str = Field("127.0.0.1", description="Bind address of the API (the Helm chart sets 0.0.0.0).")
    port: int = Field(8080, ge=1, le=65535, description="Port of the API, its OpenAPI document (/docs), /healthz, "
                      "/readyz and /metrics.")
    token: SecretStr | None = Field(None, description="Bearer token every /v1 request must send (Authorization: "
                                    "Bearer <token>); unset = no auth, only on a network where every client is "
                                    "trusted (put it in a Secret).")
    max_body_bytes: int = Field(10_000_000, ge=1000, description="Larger request bodies are refused (413).")
    max_articles: int = Field(100, ge=1, description="Articles per POST /v1/suggest; more are refused (413).")
    test_articles: int = Field(500, ge=1, le=100_000, description="How many of the latest articles (the articles "
                               "topic) POST /v1/labels/{label}/test matches by default.")
    publish_timeout_s: float = Field(10.0, gt=0, description="Wait for the broker to acknowledge a label event "
                                     "(seconds); 503 after it.")
    apply_wait_s: float = Field(5.0, ge=0, description="Wait for the memory updater to apply a label change or "
                                "decision (seconds): 200 once applied (GET shows it), else 202 after this.")
    console_session_s: float = Field(43_200.0, gt=0, description="A moderator's console session lasts this long "
                                     "after the login (seconds); then the console asks for the login again.")
    queue_max_articles: int = Field(256, ge=1, description="Articles of POST /v1/suggest that may wait to be scored "
                                    "(all clients together); a request beyond it is answered 503 with Retry-After.")
    batch_wait_ms: int = Field(20, ge=0, le=10_000, description="How long a micro-batch of POST /v1/suggest waits for "
                               "more requests after its first (milliseconds); at most worker.batch_max_messages "
                               "articles go through the pipeline together.")
