"""The moderation console (``/console`` of ``newsmon serve``): the live queue of proposals with their evidence,
decisions from the keyboard (``ModeratorDecision`` events on the decisions topic), and the labels page.

Server-rendered HTML (Jinja2 templates in ``templates/``) and one plain script and style sheet (``static/``),
all shipped in the package: no build step, nothing fetched from another host.

* :mod:`.feed`: the proposals and decisions topics read in the serve process; decisions published and watched
  until the memory applied them; the events for the browsers;
* :mod:`.routes`: the pages, the login, the server-sent events, deciding; :func:`mount_console` adds the console
  to the API's application;
* :mod:`.labels`: the labels page's JSON routes (search, live rule test, define, rename, retire);
* :mod:`.session`: who is logged in, the security headers, JSON bodies.
"""

from newsmon.console.routes import mount_console

__all__ = ["mount_console"]
