"""The README's main job: serve the agent kernel on the embedded store and watch a demo run."""
