import json, hashlib
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives import serialization
k = Ed25519PrivateKey.from_private_bytes(bytes([1]*32))
k2 = Ed25519PrivateKey.from_private_bytes(bytes([2]*32))
pub = lambda k: k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
body = {"kind":"kura.writ.v1","id":"01930000-0000-7000-8000-000000000001","holder":"session:01930000-0000-7000-8000-0000000000aa","issuer":"user:ana","tools":["fs.*"],"paths":["notes/*"],"ceiling":"write","budget":{"tool_calls":3,"tokens":1000},"issued_at":"2026-11-26T00:00:00Z","expires_at":"2026-11-27T00:00:00Z","delegate_key":pub(k2)}
b = json.dumps(body, sort_keys=True, separators=(",",":"), ensure_ascii=False).encode()
print(b.decode()); print(hashlib.sha256(b).hexdigest()); print(k.sign(b).hex()); print(pub(k))
rev = {"kind":"kura.revocation.v1","writ_id":"01930000-0000-7000-8000-000000000001","by":"user:ana","reason":"done","revoked_at":"2026-11-26T12:00:00Z"}
rb = json.dumps(rev, sort_keys=True, separators=(",",":"), ensure_ascii=False).encode()
print(rb.decode()); print(k.sign(rb).hex())
red = {"kind":"kura.redaction.v1","record_id":"01930000-0000-7000-8000-0000000000c1","record_hash":"15150c2c9711709f8f3fca7f2c38dc26ad522c5f8c3aa6be1fbb82a97a053ed9","by":"user:ana","reason":"a key leaked","redacted_at":"2026-11-26T12:00:00Z"}
db = json.dumps(red, sort_keys=True, separators=(",",":"), ensure_ascii=False).encode()
print(db.decode()); print(k.sign(db).hex())
