"""The router's live web view (/dashboard): the fleet snapshot it draws, the feed that shares it
between viewers, and the page itself (dashboard.html, package data: no build step, nothing
fetched from elsewhere)."""
