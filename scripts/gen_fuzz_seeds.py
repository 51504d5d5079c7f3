#!/usr/bin/env python3
"""Writes the libFuzzer seed corpora in fuzz/corpus/ (committed). Plain
Python, no numpy: every byte is spelled out here. Run from the repository
root: python3 scripts/gen_fuzz_seeds.py"""
import json, os, struct

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'fuzz', 'corpus')

def out(kind, name, data):
    d = os.path.join(root, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)

def npy(descr, shape, payload, fortran=False, version=1):
    sh = '(' + ''.join('%d, ' % s for s in shape).rstrip(' ') + ')' if len(shape) != 1 else '(%d,)' % shape[0]
    if len(shape) > 1: sh = '(' + ', '.join(str(s) for s in shape) + ')'
    hdr = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, 'True' if fortran else 'False', sh)
    pre = 10 if version == 1 else 12
    pad = (64 - (pre + len(hdr) + 1) % 64) % 64
    hdr = (hdr + ' ' * pad + '\n').encode('utf-8')
    lenb = struct.pack('<H', len(hdr)) if version == 1 else struct.pack('<I', len(hdr))
    return b'\x93NUMPY' + bytes([version, 0]) + lenb + hdr + payload

f4 = lambda *v: struct.pack('<%df' % len(v), *v)
out('npy', 'f4_vector', npy('<f4', (3,), f4(1.0, -2.5, 3.25)))
out('npy', 'f4_3d', npy('<f4', (2, 1, 2), f4(1, 2, 3, 4)))
out('npy', 'f4_fortran', npy('<f4', (2, 3), f4(1, 2, 3, 4, 5, 6), fortran=True))
out('npy', 'f4_scalar', npy('<f4', (), f4(7.0)))
out('npy', 'f4_empty', npy('<f4', (0, 3), b''))
out('npy', 'f8_matrix', npy('<f8', (2, 2), struct.pack('<4d', 1e300, -0.0, float('inf'), 0.1)))
out('npy', 'f2', npy('<f2', (2,), bytes([0x00, 0x3c, 0x01, 0x00])))
out('npy', 'b1', npy('|b1', (4,), bytes([0, 1, 1, 0])))
out('npy', 'i8', npy('<i8', (2,), struct.pack('<2q', 16777217, -5)))
out('npy', 'u1', npy('|u1', (3,), bytes([0, 128, 255])))
out('npy', 'i2_v2', npy('<i2', (2,), struct.pack('<2h', -1, 300), version=2))
out('npy', 'u4_v3', npy('<u4', (1,), struct.pack('<I', 4294967295), version=3))

def st(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, bytes)."""
    header, data = {}, b''
    if metadata is not None: header['__metadata__'] = metadata
    for name, dtype, shape, payload in tensors:
        header[name] = {'dtype': dtype, 'shape': list(shape), 'data_offsets': [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header, separators=(',', ':'), ensure_ascii=False).encode('utf-8')
    text += b' ' * ((8 - len(text) % 8) % 8)
    return struct.pack('<Q', len(text)) + text + data, text

cases = {
    'f32_two': [('a', 'F32', (2,), f4(1, 2)), ('b.weight', 'F32', (1, 2), f4(3, 4))],
    'mixed': [('h', 'F16', (2,), bytes([0, 0x3c, 0, 0xc0])), ('bf', 'BF16', (1,), bytes([0x80, 0x3f])),
              ('m', 'BOOL', (3,), bytes([1, 0, 1])), ('i', 'I32', (1,), struct.pack('<i', -7)),
              ('d', 'F64', (1,), struct.pack('<d', 2.5)), ('u', 'U8', (2,), bytes([9, 250]))],
    'metadata': [('x', 'F32', (), f4(1))],
    'empty_tensor': [('z', 'F32', (0, 4), b''), ('y', 'I64', (1,), struct.pack('<q', 1 << 40))],
    'unicode_name': [('caf\u00e9 \u2713', 'F32', (1,), f4(0.5))],
    'none': [],
}
for name, tensors in cases.items():
    blob, text = st(tensors, {'format': 'pt'} if name == 'metadata' else None)
    out('safetensors', name, blob)
    out('json', name, text)
out('json', 'escapes', b'{"a\\u00e9\\n\\"q\\"":{"k":[1,-0,2e5,1.5,[]]},"\\ud83d\\ude00":"x"}')
out('json', 'nested', b'[[[{"a":[{"b":{}}]}]],"s",123456789012345678901234567890]')

commands = ['sdpa', 'sdpa-backward', 'mha', 'mha-backward', 'example', 'explain', 'heatmap',
            'scaling', 'train', 'heads', 'bench', 'info']
args = {
    'sdpa': ['--query', 'q.npy', '--key=k.npy', '--value', 'v.npy', '--causal', 'top-left',
             '--scale', '0.125', '--threads', '2', '--out', 'o.npy', '--reference'],
    'mha-backward': ['--params', 'p.safetensors', '--num-heads', '4', '--query', 'x.npy',
                     '--grad-out', 'd.npy', '--grads', 'g.safetensors', '--per-head'],
    'train': ['--task', 'recall-prev', '--steps', '10', '--lr', '3e-3', '--min-lr', '1e-5',
              '--seed', '0x2a', '--quiet'],
    'explain': ['--x', '1,2;3,4', '--heads', '2', '--seed', '7', '--help'],
    'info': ['file.npy', 'extra'],
    'bench': ['--mode', 'backward', '--seq', '-1', '--head-dim', '99999999999999999999'],
}
for cmd, a in args.items():
    out('cli_args', cmd, bytes([commands.index(cmd)]) + b'\0'.join(x.encode() for x in a))
