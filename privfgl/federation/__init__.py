"""Federation runtime: messages, channel, transcript, phase timers, and the in-process runtime."""
from privfgl.federation.channel import Channel
from privfgl.federation.messages import SERVER, Message, client_name, payload_nbytes
from privfgl.federation.runtime import Federation, flatten, unflatten
from privfgl.federation.timers import PhaseTimer
from privfgl.federation.transcript import KEEP_POLICIES, Transcript

__all__ = ["Channel", "Federation", "KEEP_POLICIES", "Message", "PhaseTimer", "SERVER", "Transcript",
           "client_name", "flatten", "payload_nbytes", "unflatten"]
