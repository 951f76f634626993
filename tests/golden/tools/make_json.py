import json, re, os, hashlib
G='/work/oracle/golden'
# ---- perplexity.json
runs=[]
for c,n in [(512,20),(2048,10)]:
    for fa in ['auto','off']:
        out=open(f'{G}/ppl_raw/c{c}_fa{fa}.out').read(); log=open(f'{G}/ppl_raw/c{c}_fa{fa}.log').read()
        vals=[float(v) for _,v in re.findall(r'\[(\d+)\]([0-9.]+),', out)]
        m=re.search(r'Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)', log)
        fa_res=re.search(r'Flash Attention was auto, set to (\w+)', log)
        runs.append({'command': f'llama-perplexity -m gemma-3-270m-q4_k_m.gguf -f /work/shared/data/wikitext-2-raw-test.txt -c {c} --chunks {n} -t 2' + ('' if fa=='auto' else ' -fa off'),
            'n_ctx': c, 'chunks': n, 'threads': 2, 'flash_attn': fa + (f' (resolved: {fa_res.group(1)})' if fa_res else ''),
            'kv_cache_type': 'f16 (K and V, default)', 'ppl': float(m.group(1)), 'ppl_stderr': float(m.group(2)),
            'running_ppl_per_chunk': vals, 'scored_tokens_per_chunk': c - 1 - c//2, 'total_scored_tokens': n*(c-1-c//2),
            'batch_note': re.search(r'calculating perplexity over .*', log).group(0)})
json.dump({'model':'gemma-3-270m-q4_k_m.gguf (sha256 a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818)',
  'llama_cpp_commit':'69d8e4be47243e83b3d0d71e932bc7aa61c644dc (TheTom/llama-cpp-turboquant, build 9079)',
  'data':'/work/shared/data/wikitext-2-raw-test.txt sha256 bbf94c53a05abe9ee670d3b6343608095822c85e26de37c70b24fc571964574a; tokenizes to 292282 tokens incl. one leading BOS (golden/wikitext_test_ids.json)',
  'method':'whole file tokenized once with BOS; chunk i = tokens[i*n_ctx : (i+1)*n_ctx], its first token replaced by BOS (id 2); NLL over positions n_ctx/2 .. n_ctx-2 predicting the next token (n_ctx-1-n_ctx/2 tokens per chunk); running value printed after each chunk = exp(mean NLL so far); stderr = ppl*sqrt(var(nll)/(count-1)). 4 sequences per 2048-token batch at c=512.',
  'runs':runs}, open(f'{G}/perplexity.json','w'), indent=1)
# ---- greedy.json
def load(p): return json.loads(open(p,'rb').read().decode('utf-8','replace'))
prompts=["The capital of France is","def fibonacci(n):","Once upon a time,"]
res=[]
for i,p in enumerate(prompts):
    cfgs={}
    for key,fn,desc in [('fa_on_kv_f16',f'p{i}_faauto','llama.cpp default: flash_attn auto -> enabled on CPU, KV f16'),
                        ('fa_off_kv_f16',f'p{i}_faoff','flash_attn off, KV f16'),
                        ('fa_off_kv_f32',f'p{i}_faoff_kvf32','flash_attn off, KV f32 (higher-precision reference)')]:
        d=load(f'{G}/greedy_raw/{fn}.json')
        margins=[round(s['top5'][0][1]-s['top5'][1][1],6) for s in d['steps']]
        comp=f'{G}/completion_raw/p{i}_fa{"auto" if key=="fa_on_kv_f16" else "off"}.txt'
        cfgs[key]={'description':desc,'generated_ids':d['generated_ids'],'text':d['text'],
                   'first_eog_step':d['first_eog_step'],'top1_top2_margin_per_step':margins,
                   'first_step_with_margin_below_0.1': next((j for j,m in enumerate(margins) if m<0.1),None),
                   'steps':d['steps'],
                   'step0_full_logits_f32_file': f'greedy_raw/logits0_p{i}_{fn.split("_",1)[1]}.f32',
                   'llama_completion_text_identical': (open(comp,encoding='utf-8').read().rstrip('\n')==d['text'].rstrip('\n')) if key!='fa_off_kv_f32' else None}
    a,b,c=[cfgs[k]['generated_ids'] for k in cfgs]
    fd=lambda x,y: next((j for j,(u,v) in enumerate(zip(x,y)) if u!=v),None)
    res.append({'prompt':p,'prompt_ids':load(f'{G}/greedy_raw/p{i}_faauto.json')['prompt_ids'],'add_bos':True,'n_predict':64,
                'first_divergence_step':{'fa_on_vs_fa_off_f16':fd(a,b),'fa_on_f16_vs_fa_off_f32':fd(a,c),'fa_off_f16_vs_fa_off_f32':fd(b,c)},
                'configs':cfgs})
json.dump({'model':'gemma-3-270m-q4_k_m.gguf (sha256 a5fd3b62...6818)','llama_cpp_commit':'69d8e4be47243e83b3d0d71e932bc7aa61c644dc',
  'generator':'/work/oracle/tools/greedy_ids.cpp (libllama API: tokenize with add_bos=true, parse_special=true; n_ctx=512, n_batch=n_ubatch=512, threads 2; whole prompt decoded in one batch, then one token per decode; argmax over logits, ties -> lowest id; EOG not stopped, exactly 64 tokens). Cross-checked: llama-completion --temp 0 -no-cnv gives identical text.',
  'notes':'top5 entries are [token_id, raw logit]. Gemma 3 has no final logit softcapping in this GGUF. Near-ties make later steps fragile: compare only up to first_step_with_margin_below_0.1, or compare logits.',
  'prompts':res}, open(f'{G}/greedy.json','w'), ensure_ascii=False, indent=1)
print('ok')
