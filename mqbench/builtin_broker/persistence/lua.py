"""The five Lua scripts of the Redis device store and the key scheme they work on.

Keys of one client share the hash tag ``{client_id}``, so a Redis Cluster keeps them in
one slot and each script stays a single-slot, atomic operation:

``{id}_messages``
    sorted set of message keys; the score is a sequence that keeps growing across the
    65535 -> 1 packet-id wrap (one more than the highest score present, or the packet id
    when the set is empty), so ZRANGE returns messages in delivery order.
``{id}_messages_<packet id>``
    string: the serialized message (``mqbench.builtin_broker.message``), ``SET ... EX <ttl>``;
    a QoS 2 message past PUBREC is replaced by the marker ``R`` (TTL kept).
``{id}_last_packet_id``
    string: the last packet id allocated (no TTL: it must survive an empty set).
"""

from __future__ import annotations

from typing import Final


def messages_key(client_id: str) -> str:
    """``{id}_messages``: the sorted set."""
    return "{" + client_id + "}_messages"


def message_key(client_id: str, packet_id: int) -> str:
    """``{id}_messages_<pid>``: one message."""
    return "{" + client_id + "}_messages_" + str(packet_id)


def last_packet_id_key(client_id: str) -> str:
    """``{id}_last_packet_id``."""
    return "{" + client_id + "}_last_packet_id"


SAVE: Final = """
-- KEYS[1] {id}_messages, KEYS[2] {id}_last_packet_id
-- ARGV[1] messages limit; then pairs ARGV[2k] ttl seconds (0: none), ARGV[2k+1] message
-- Returns the last packet id before this call (the new ids follow it, wrapping at 65535).
local messagesKey = KEYS[1]
local lastPacketIdKey = KEYS[2]
local maxMessagesSize = tonumber(ARGV[1])
local previous = tonumber(redis.call('GET', lastPacketIdKey) or '0')
local packetId = previous
local score = 0
local top = redis.call('ZRANGE', messagesKey, -1, -1, 'WITHSCORES')
if top[2] then score = tonumber(top[2]) end
for i = 2, #ARGV, 2 do
  packetId = packetId + 1
  if packetId > 65535 then packetId = 1 end
  if score > 0 then score = score + 1 else score = packetId end
  local msgKey = messagesKey .. '_' .. packetId
  local ttl = tonumber(ARGV[i])
  if ttl > 0 then
    redis.call('SET', msgKey, ARGV[i + 1], 'EX', ttl)
  else
    redis.call('SET', msgKey, ARGV[i + 1])
  end
  redis.call('ZADD', messagesKey, score, msgKey)
end
redis.call('SET', lastPacketIdKey, packetId)
local numElementsToRemove = redis.call('ZCARD', messagesKey) - maxMessagesSize
if numElementsToRemove > 0 then
  local trimmedElements = redis.call('ZRANGE', messagesKey, 0, numElementsToRemove - 1)
  for _, key in ipairs(trimmedElements) do
    redis.call('DEL', key)
  end
  redis.call('ZREMRANGEBYRANK', messagesKey, 0, numElementsToRemove - 1)
end
return previous
"""

FETCH: Final = """
-- KEYS[1] {id}_messages. Returns {key1, value1, key2, value2, ...} in score order and
-- removes references whose string has expired.
local messagesKey = KEYS[1]
local elements = redis.call('ZRANGE', messagesKey, 0, -1)
local messages = {}
for _, key in ipairs(elements) do
  local value = redis.call('GET', key)
  if value then
    table.insert(messages, key)
    table.insert(messages, value)
  else
    redis.call('ZREM', messagesKey, key)
  end
end
return messages
"""

REMOVE: Final = """
-- KEYS[1] {id}_messages; ARGV packet ids delivered (PUBACK or PUBCOMP).
local messagesKey = KEYS[1]
for i = 1, #ARGV do
  local key = messagesKey .. '_' .. ARGV[i]
  redis.call('DEL', key)
  redis.call('ZREM', messagesKey, key)
end
return #ARGV
"""

MARK_PUBREL: Final = """
-- KEYS[1] {id}_messages; ARGV packet ids that got PUBREC: keep only a PUBREL marker.
local messagesKey = KEYS[1]
local marked = 0
for i = 1, #ARGV do
  local key = messagesKey .. '_' .. ARGV[i]
  if redis.call('EXISTS', key) == 1 then
    redis.call('SET', key, 'R', 'KEEPTTL')
    marked = marked + 1
  end
end
return marked
"""

CLEAR: Final = """
-- KEYS[1] {id}_messages, KEYS[2] {id}_last_packet_id: drop the client's session data.
local messagesKey = KEYS[1]
local elements = redis.call('ZRANGE', messagesKey, 0, -1)
for _, key in ipairs(elements) do
  redis.call('DEL', key)
end
redis.call('DEL', messagesKey, KEYS[2])
return #elements
"""

SCRIPTS: Final[dict[str, str]] = {
    "SAVE": SAVE,
    "FETCH": FETCH,
    "REMOVE": REMOVE,
    "MARK_PUBREL": MARK_PUBREL,
    "CLEAR": CLEAR,
}
"""The scripts by name."""
