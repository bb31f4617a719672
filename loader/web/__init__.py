"""The web interface ``pgkb serve`` serves at ``/`` beside its JSON API: the documents, one
document with its outline and relations, the graph as a picture, search that shows why a result
ranked, cited answers (streamed when a chat model writes them) and the knowledge base's health.

Server-rendered HTML (Jinja2 templates in ``templates/``, escaped everywhere), one stylesheet and
one small script of our own in ``static/``, nothing loaded from another site; a
Content-Security-Policy forbids inline scripts. Everything it shows comes through the ``kb``
functions on the server's pooled connections (:mod:`loader.web.reads`), so a role's grants and
the served ``--collection`` scope hold exactly as for the JSON API. With a serve token set the
browser signs in once (:mod:`loader.web.auth`).
"""
