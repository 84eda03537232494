"""The Pi adapter: Pi (``@mariozechner/pi-coding-agent``) driven in RPC mode over JSON lines,
its options, its launch and its events mapped onto Shepherd's. The TypeScript extension Pi loads
as a child is ``actors/pi/shepherd_child.ts``."""
