"""The web console's static files (static/): served at /ui by ollama_py/server/routes_ui.py.

Plain HTML, CSS and ES modules, no build step; vendor/ holds pinned npm releases (marked, DOMPurify) with their
licences. Nothing here is imported at run time: the package only carries the files into the wheel.
"""
