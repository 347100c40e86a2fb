"""The dashboard the server serves itself at `/`: one page (static HTML, CSS and an ES module, no build step) that
signs in with an API token and reads everything through the same typed API the CLI uses."""
