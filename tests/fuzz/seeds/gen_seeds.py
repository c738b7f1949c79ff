import json, os, struct, subprocess
R='tests/fuzz/corpus'
def w(t, name, data):
    os.makedirs(f'{R}/{t}', exist_ok=True)
    if isinstance(data, str): data = data.encode()
    open(f'{R}/{t}/{name}','wb').write(data)
# ---- safetensors
def st(tensors, meta=None):
    hdr = {}
    if meta: hdr['__metadata__'] = meta
    blob = b''
    for name, dt, shape, payload in tensors:
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [len(blob), len(blob)+len(payload)]}
        blob += payload
    h = json.dumps(hdr, separators=(',',':')).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    return struct.pack('<Q', len(h)) + h + blob
w('safetensors','two_tensors.safetensors', st([('a.weight','F32',[2,3],struct.pack('<6f',*range(6))),('b.weight','BF16',[4],b'\x80\x3f'*4)],{'format':'pt'}))
w('safetensors','fp8_scale.safetensors', st([('l.weight','F8_E4M3',[4,4],bytes(range(16))),('l.weight_scale_inv','F32',[1,1],struct.pack('<f',0.5))]))
w('safetensors','i8_empty.safetensors', st([('q','I8',[3,1],b'\x01\x02\x03'),('e','F32',[0],b'')]))
w('safetensors','header_only.safetensors', st([]))
# first 64 KB of the fixture shard (header + some payload)
w('safetensors','tiny_shard_head.safetensors', open('tests/fixtures/tiny/ckpt/model-00001-of-00002.safetensors','rb').read(8+struct.unpack('<Q',open('tests/fixtures/tiny/ckpt/model-00001-of-00002.safetensors','rb').read(8))[0]+256))
# ---- config
cfg = open('tests/fixtures/tiny/ckpt/config.json').read()
w('config','tiny_config.json', cfg)
c = json.loads(cfg)
c2 = dict(c); c2.pop('quantization_config', None); c2['rope_scaling'] = None
w('config','no_quant_no_rope.json', json.dumps(c2))
c3 = dict(c); c3['model_type']='deepseek_v2'; c3['num_nextn_predict_layers']=0; c3['topk_method']='group_limited_greedy'
w('config','v2_like.json', json.dumps(c3))
# ---- checkpoint index
idx = open('tests/fixtures/tiny/ckpt/model.safetensors.index.json').read()
w('ckpt_index','tiny_index.json', idx)
j = json.loads(idx); wm = j['weight_map']; keys = list(wm)[:8]
w('ckpt_index','partial_index.json', json.dumps({'metadata':{'total_size':1},'weight_map':{k:wm[k] for k in keys}}))
w('ckpt_index','empty_map.json', '{"weight_map": {}}')
# ---- tokenizer: the fixture's pipeline, 256 byte tokens, a few merges
fx = json.load(open('tests/fixtures/tokenizer/tokenizer.json'))
def byte_char(b):
    printable = (0x21 <= b <= 0x7e) or (0xa1 <= b <= 0xac) or b >= 0xae
    if printable: return chr(b)
    k = sum(1 for i in range(b) if not ((0x21 <= i <= 0x7e) or (0xa1 <= i <= 0xac) or i >= 0xae))
    return chr(256 + k)
vocab = {byte_char(b): b for b in range(256)}
extra = ['he','ll','llo','hello','Ġw','or','ld','Ġwor','Ġworld','12','123']
for i,e in enumerate(extra): vocab[e] = 256+i
merges = ['h e','l l','ll o','he llo','Ġ w','o r','l d','Ġw or','Ġwor ld','1 2','12 3']
def tok(merges_v, added):
    t = {k: fx[k] for k in ('normalizer','pre_tokenizer','post_processor','decoder') if k in fx}
    t['version']='1.0'; t['truncation']=None; t['padding']=None
    t['added_tokens'] = added
    t['model'] = {'type':'BPE','dropout':None,'unk_token':None,'continuing_subword_prefix':None,
                  'end_of_word_suffix':None,'fuse_unk':False,'byte_fallback':False,'vocab':vocab,'merges':merges_v}
    return json.dumps(t, ensure_ascii=False)
added = [{'id':300,'content':'<｜begin▁of▁sentence｜>','single_word':False,'lstrip':False,'rstrip':False,'normalized':False,'special':True},
         {'id':301,'content':'<think>','single_word':False,'lstrip':False,'rstrip':False,'normalized':True,'special':False}]
w('tokenizer','small_bpe.json', tok(merges, added))
w('tokenizer','small_bpe_pairs.json', tok([m.split(' ') for m in merges], []))
w('tokenizer','no_merges.json', tok([], added))
# ---- run requests
lines = [
 '{"id": "a", "prompt": "Hello", "max_tokens": 8, "temperature": 0.7, "stop": ["\\n", "END"]}',
 '{"id": 7, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "top_p": 0.9, "top_k": 40, "seed": 3}',
 '{"custom_id": "req-1", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "x", "messages": [{"role": "user", "content": "2+2?"}], "max_tokens": 16}}',
 '{"id": "t", "messages": [{"role": "user", "content": "weather?"}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}',
 '{"id": "m", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{\\"a\\":1}"}}]}, {"role": "tool", "tool_call_id": "c0", "content": "42"}], "min_p": 0.05, "repetition_penalty": 1.1}',
 '{"prompt": "no id", "stop": "x"}',
 '{"id": 1e999, "prompt": "big id"}',
 '{"id": null, "prompt": ""}',
]
for i,l in enumerate(lines): w('run_req', f'line{i}.jsonl', l)
w('run_req','batch.jsonl', '\n'.join(lines) + '\n\n{broken\n')
# ---- toolcall
CB="<｜tool▁calls▁begin｜>"; CE="<｜tool▁calls▁end｜>"; B="<｜tool▁call▁begin｜>"; E="<｜tool▁call▁end｜>"; S="<｜tool▁sep｜>"
FN=lambda n,a: B+"function"+S+n+"\n```json\n"+a+"\n```"+E
tc = [CB+FN("get_weather",'{"city": "Paris"}'),
      "Let me check."+CB+FN("a",'{ "x" : 1.50, "s": "a  b\\u00e9" }')+"\n"+FN("b","{}")+CE,
      CB+FN("f","{city: Paris}")+CE+"tail",
      "Hi "+CB+B+"function"+S+"f\n```json\n{\"a\":",
      CB+B+"get"+S+'{"q": "x"}'+E+CE, CB+B+"garbage"+E+CE, "a <｜tool▁call x> b <｜tool"]
for i,t in enumerate(tc):
    w('toolcall', f'case{i}', bytes([i*5 % 32]) + t.encode())
# ---- reasoning
rs = ["<think>Let me think.\nOK.</think>\n\nThe answer is 4.", "plain answer", "<think>unterminated",
      "</think>answer after forced open", "  <think></think>x", "<thi</thin<think>a</think>b</think>c"]
for i,t in enumerate(rs):
    w('reasoning', f'case{i}', bytes([(i*7) | (128 if i == 3 else 0)]) + t.encode())
# ---- read back
recs = ['{"id":"a","content":"x","finish_reason":"stop"}', '{"id":7,"error":{"message":"bad"}}', '{"custom_id":"req-1","response":{"body":{}}}']
w('read_back','records.jsonl', '\n'.join(recs)+'\n')
w('read_back','torn.jsonl', '\n'.join(recs)+'\n{"id":"b","cont')
w('read_back','bad_line.jsonl', recs[0]+'\nnot json\n'+recs[1]+'\n')
import subprocess
def zst(data):
    return subprocess.run(['zstd','-q','-c','-1'], input=data, capture_output=True, check=True).stdout
fr = b''.join(zst((r+'\n').encode()) for r in recs)
w('read_back','frames.jsonl.zst', fr)
w('read_back','torn_frame.jsonl.zst', fr + zst(b'{"id":"z","content":"long"}\n')[:-5])
