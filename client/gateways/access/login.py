"""Who a gateway client is and what it may do: the pure part every protocol's connection shares.

:class:`Access` is the gateway's: its users file (None without ``--users``:
every client may publish and subscribe to everything), replaced whole when
the file is re-read, the login throttle and the refusal counters.
:class:`Login` is one client's: it starts as the file's anonymous user (or
as nobody), and a credential the client sends goes through
:meth:`Login.attempt`: refused at once while its address is slowed, accepted
at once when this process verified the same credential before, else handed
to the driver as a :class:`~fyrehose.gateways.requests.Verify` request (the
slow hash runs off the loop) whose result comes back to :meth:`Login.conclude`.

The rights are read through :attr:`Login.user` on every check, so a re-read
file applies to connected clients at once, as nats-server's reload does: a
user removed from the file loses every right; connections stay open.
"""
from __future__ import annotations

import enum
from collections import Counter

from fyrehose.gateways.access.guard import LoginThrottle, LogLimiter
from fyrehose.gateways.access.users import Credential, User, UsersFile

EVERYONE = User("default")  # every right: a gateway without a users file


class Outcome(enum.Enum):
    ACCEPTED = "accepted"
    REFUSED = "refused"  # the credential proves no user
    THROTTLED = "throttled"  # not looked at: the address failed too often lately


class Access:
    """A gateway's users, login throttle and counters (pure, shared by its connections)."""

    def __init__(self, users: UsersFile | None, stats: Counter | None = None) -> None:
        self.users = users
        self.version = 0
        self.throttle = LoginThrottle()
        self.log = LogLimiter()
        self.stats: Counter = stats if stats is not None else Counter()

    @property
    def required(self) -> bool:
        """Whether clients are checked at all (``--users`` was given)."""
        return self.users is not None

    def replace(self, users: UsersFile) -> None:
        """A re-read users file: connected clients' rights follow it from their next check."""
        self.users = users
        self.version += 1

    def refused(self, what: str, address: str, now: float) -> bool:
        """Count one refusal; whether it may be logged now (one line per address per second)."""
        self.stats[what] += 1
        return self.log.allow(address, now)


class Login:
    """One client's identity at a gateway."""

    def __init__(self, access: Access, address: str) -> None:
        self.access = access
        self.address = address
        self._name: str | None = None  # the user logged in as; None: anonymous
        self._version = -1
        self._user: User | None = None

    @property
    def user(self) -> User | None:
        """The client's current rights: its user's, the anonymous user's, or None (it may do nothing)."""
        access = self.access
        if self._version != access.version:
            self._version = access.version
            users = access.users
            if users is None:
                self._user = EVERYONE
            elif self._name is None:
                self._user = users.anonymous_user()
            else:
                self._user = users.user(self._name)
        return self._user

    @property
    def name(self) -> str:
        """The user name a client is known by (Redis's ACL WHOAMI): ``default`` before any login."""
        user = self.user
        return self._name or (user.name if user is not None else EVERYONE.name)

    @property
    def logged_in(self) -> bool:
        """Whether the client proved a user's credential (not just the anonymous one)."""
        return self._name is not None

    @property
    def allowed_in(self) -> bool:
        """Whether the client may do anything at all as it stands."""
        return self.user is not None

    # ------------------------------------------------------------ logging in

    def attempt(self, credential: Credential, now: float) -> Outcome | None:
        """Settled at once (throttled, or verified before), or None: verify it off the loop, then :meth:`conclude`."""
        access = self.access
        users = access.users
        if users is None:
            return Outcome.REFUSED  # nothing to log in to; protocols without users answer as their servers do
        if access.throttle.blocked(self.address, now) > 0:
            access.stats["logins throttled"] += 1
            return Outcome.THROTTLED
        known = users.remembered(credential)
        if known is not None:
            return self._accept(known)
        return None

    def conclude(self, user: User | None, now: float) -> Outcome:
        """The result of verifying the attempted credential."""
        if user is None:
            self.access.throttle.failed(self.address, now)
            self.access.stats["logins refused"] += 1
            return Outcome.REFUSED
        return self._accept(user)

    def certificate(self, name: str | None) -> bool:
        """Log in as the user a verified client certificate names (its subject's common name), if there is one."""
        users = self.access.users
        user = users.user(name) if users is not None and name is not None else None
        if user is None:
            return False
        self._accept(user)
        return True

    def _accept(self, user: User) -> Outcome:
        self.access.throttle.succeeded(self.address)
        self.access.stats["logins accepted"] += 1
        self._name = user.name
        self._version = -1  # read the rights afresh
        return Outcome.ACCEPTED

    # ------------------------------------------------------------ rights

    def may_publish(self, subject: str) -> bool:
        user = self.user
        return user is not None and (user.publish.everything or user.publish.permits(subject))

    def may_subscribe(self, pattern: str) -> bool:
        user = self.user
        return user is not None and (user.subscribe.everything or user.subscribe.permits_subscription(pattern))

    def may_receive(self, subject: str) -> bool:
        """Whether a message on ``subject`` may be delivered to this client (a subscription overlapping a deny)."""
        user = self.user
        return user is not None and (user.subscribe.everything or user.subscribe.permits(subject))

    @property
    def filtered(self) -> bool:
        """Whether deliveries must be asked :meth:`may_receive` (the user's subscribe rights deny something)."""
        user = self.user
        return user is None or bool(user.subscribe.deny) or user.subscribe.allow is not None
