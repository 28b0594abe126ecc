"""Who a NATS client is and what it may do, as nats-server's authorization decides it.

Pure.  With ``--users`` (docs/gateways.md, "NATS: users, permissions, TLS"):

- A CONNECT's ``user`` and ``pass`` name a user and its password,
  ``auth_token`` a token (one of the file's ``fh_...`` tokens); a CONNECT
  with neither gets the file's anonymous user (nats-server's
  ``no_auth_user``), and without one it is refused.  With ``--tls-ca`` the
  client certificate's common name names the user and the CONNECT's
  credentials are not looked at (nats-server's ``verify_and_map``).  A
  CONNECT that names an ``account`` is refused, as nats-server refuses it.
- Publish and subscribe rights are the user's
  (:mod:`fyrehose.gateways.access.permissions`), refused with nats-server's
  own ``Permissions Violation`` texts (:func:`publish_violation`,
  :func:`subscription_violation`).
- Responses: a client whose publish rights are restricted may still answer a
  request delivered to it, once, when the request's reply subject is an
  ``_INBOX.`` one: nats-server's ``allow_responses`` with its defaults (one
  response per request), for inbox replies only, so that a requester cannot
  aim a responder at a subject of its choosing.  A publish deny that covers
  the inbox still wins (``--deny-publish '_INBOX.>'`` switches responses
  off).  The requests remembered are bounded (:data:`MAX_RESPONSES`, the
  oldest forgotten first, as nats-server bounds its own).
"""
from __future__ import annotations

from collections.abc import Callable

from fyrehose.gateways.access.login import Access, Login, Outcome
from fyrehose.gateways.access.permissions import is_subset
from fyrehose.gateways.access.users import Credential, Password, Token

AUTHORIZATION_VIOLATION = "Authorization Violation"
INBOX_PREFIX = "_INBOX."
MAX_RESPONSES = 4096  # requests a client may still answer, remembered at once (nats-server's replyPermLimit)


def auth_required(access: Access) -> bool:
    """INFO's ``auth_required``: users are set and there is no anonymous user (nats-server leaves it out when
    a ``no_auth_user`` lets a client in without credentials)."""
    return access.users is not None and access.users.anonymous is None


def go_quoted(text: str) -> str:
    """``text`` as Go's ``%q`` writes a subject into nats-server's errors."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def publish_violation(subject: str) -> str:
    return f"Permissions Violation for Publish to {go_quoted(subject)}"


def subscription_violation(subject: str, queue: str | None) -> str:
    if queue is None:
        return f"Permissions Violation for Subscription to {go_quoted(subject)}"
    return f"Permissions Violation for Subscription to {go_quoted(subject)} using queue {go_quoted(queue)}"


def withdrawn_subscription(subject: str, sid: str) -> str:
    """What nats-server tells a client whose subscription a reload of the users no longer permits."""
    return f"Permissions Violation for Subscription to {go_quoted(subject)} (sid {go_quoted(sid)})"


class NatsAuthorization:
    """One client's login and rights: its CONNECT's credentials, the requests it may answer."""

    def __init__(self, login: Login, certificate: Callable[[], str | None] | None = None) -> None:
        self.login = login
        self.certificate = certificate  # the verified client certificate's common name (--tls-ca with --users)
        self.version = login.access.version  # of the users file, when the rights were last looked at
        self.responses: dict[str, None] = {}  # reply subjects of requests delivered and not yet answered

    def log_in(self, options: dict, now: float) -> Outcome | Credential:
        """ACCEPTED, REFUSED or THROTTLED at once, or the credential to verify off the loop (then
        :meth:`Login.conclude`)."""
        login = self.login
        if options.get("account") or options.get("new_account"):
            return self._refuse()
        if self.certificate is not None:
            return Outcome.ACCEPTED if login.certificate(self.certificate()) else self._refuse()
        user, password, token = options.get("user"), options.get("pass"), options.get("auth_token")
        if not all(value is None or isinstance(value, str) for value in (user, password, token)):
            return self._refuse()
        if not (user or password or token):
            return Outcome.ACCEPTED if login.allowed_in else self._refuse()
        credential: Credential
        if user:
            credential = Password(user, password or "")
        elif token:
            credential = Token(token)
        else:  # a password without a user names nobody
            return login.conclude(None, now)
        outcome = login.attempt(credential, now)
        return credential if outcome is None else outcome

    def _refuse(self) -> Outcome:
        self.login.access.stats["logins refused"] += 1
        return Outcome.REFUSED

    def reloaded(self) -> bool:
        """Whether the users file was re-read since the last call (the rights must be looked at again)."""
        version = self.login.access.version
        if version == self.version:
            return False
        self.version = version
        return True

    # ------------------------------------------------------------ responses

    def requested(self, reply: str) -> None:
        """A request with this reply subject was delivered to the client: it may answer it once."""
        if not reply.startswith(INBOX_PREFIX) or self.login.may_publish(reply):
            return
        responses = self.responses
        if len(responses) >= MAX_RESPONSES:
            del responses[next(iter(responses))]
        responses[reply] = None

    def may_publish(self, subject: str) -> bool:
        """The user's publish rights, or a response to a request the client was delivered."""
        if self.login.may_publish(subject):
            return True
        if subject not in self.responses:
            return False
        del self.responses[subject]
        user = self.login.user
        return user is not None and not any(is_subset(subject, denied) for denied in user.publish.deny)
