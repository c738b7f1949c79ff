"""gen_seeds_hub.py - seeds for fuzz_hub_info and fuzz_hub_header: the model
info and the response headers tests/hub_server.py serves (its own Repo class
over the tiny fixture checkpoint, so the shape is the one the e2e pull tests
use), plus hand-made edge cases. Run from the repository root:
python3 tests/fuzz/seeds/gen_seeds_hub.py"""
import json, os, shutil, sys, tempfile
sys.path.insert(0, 'tests')
import hub_server
R = 'tests/fuzz/corpus'
def w(t, name, data):
    os.makedirs(f'{R}/{t}', exist_ok=True)
    if isinstance(data, str): data = data.encode()
    open(f'{R}/{t}/{name}', 'wb').write(data)
root = tempfile.mkdtemp()
try:
    shutil.copytree('tests/fixtures/tiny/ckpt', f'{root}/org/tiny')
    os.makedirs(f'{root}/org/tiny/sub')
    open(f'{root}/org/tiny/sub/README.md', 'w').write('dup\n')
    open(f'{root}/org/tiny/README.md', 'w').write('dup\n')  # same blob twice
    info = hub_server.Repo(root, 'org/tiny', {}).info()
    fake = hub_server.Repo(root, 'org/tiny', {'config.json': 12345}).info()
finally:
    shutil.rmtree(root)
w('hub_info', 'server_tiny.json', json.dumps(info))
w('hub_info', 'server_fake_size.json', json.dumps(fake))
w('hub_info', 'server_404.json', json.dumps(dict(error='Repository Not Found')))
sha, blob = info['sha'], info['siblings'][0]['blobId']
lfs = 'AB' * 32
def one(**s): return json.dumps(dict(sha=sha, siblings=[s]))
w('hub_info', 'edge_upper_lfs.json', one(rfilename='x.safetensors', size=3, blobId=blob,
                                         lfs=dict(sha256=lfs, size=3)))
w('hub_info', 'edge_unsafe_path.json', one(rfilename='a/../../etc/passwd', size=1, blobId=blob))
w('hub_info', 'edge_dot_path.json', one(rfilename='./config.json', size=1, blobId=blob))
w('hub_info', 'crash-size-1e30-float-cast.json', one(rfilename='config.json', size=1e30, blobId=blob))
w('hub_info', 'edge_negative_size.json', one(rfilename='config.json', size=-1, blobId=blob))
w('hub_info', 'edge_no_siblings.json', json.dumps(dict(sha=sha, siblings=[])))
w('hub_info', 'edge_short_sha.json', json.dumps(dict(sha=sha[:39], siblings=info['siblings'])))
w('hub_info', 'edge_sibling_not_object.json', json.dumps(dict(sha=sha, siblings=[1, "x", None])))
w('hub_info', 'edge_truncated.json', json.dumps(info)[:200])
# headers, as the server sends them (one response per file; a redirect hop first)
w('hub_header', 'server_small_file.txt',
  'HTTP/1.0 200 OK\r\nServer: SimpleHTTP/0.6 Python/3\r\nContent-Type: application/octet-stream\r\n'
  'ETag: "%s"\r\nX-Repo-Commit: %s\r\nContent-Length: 4\r\nAccept-Ranges: bytes\r\n\r\n' % (blob, sha))
w('hub_header', 'server_lfs_redirect_range.txt',
  'HTTP/1.0 302 Found\r\nLocation: http://localhost:1/_lfs/%s\r\nX-Linked-Etag: "%s"\r\n'
  'X-Linked-Size: 1000\r\nContent-Length: 0\r\n\r\n'
  'HTTP/1.0 206 Partial Content\r\nContent-Range: bytes 500-999/1000\r\nContent-Length: 500\r\n\r\n'
  % (lfs.lower(), lfs.lower()))
w('hub_header', 'server_429.txt', 'HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\n\r\n')
w('hub_header', 'server_404.txt', 'HTTP/1.1 404 Not Found\r\nX-Error-Code: RepoNotFound\r\n\r\n')
w('hub_header', 'edge_error_code_spaces.txt', 'X-Error-Code:' + ' ' * 600)
w('hub_header', 'edge_error_code_long.txt', 'x-error-code: ' + 'G' * 700 + '\n')
w('hub_header', 'edge_retry_after_big.txt', 'Retry-After: 1e999\nRetry-After: nan\nRetry-After: -5\n')
w('hub_header', 'edge_range_big.txt', 'Content-Range: bytes 99999999999999999999999-1/2\n')
w('hub_header', 'edge_status_bare.txt', 'HTTP/\nHTTP/2 99999999999999999999\n')
