/* The HTML viewer of memra-trace html: one page, inline CSS and JS, no network. The data goes between
 * VIEWER_HEAD and VIEWER_TAIL as `const TRACE = {src, tracks: [[tid, name]..], ev: [[tid, t0, t1, instant,
 * name, step, req, args]..]}` (times in us).
 * Lanes: one per track with events (stage actors, stage streams, boundary hops, readback, scheduler, runtime, and
 * the GPU kernels memra-bench --kernel-trace merges in, teal). Bubbles (idle stretches between two walks of a
 * stream) are shaded, hops are arrows from the producer's stream to the consumer's. Wheel zooms around the pointer,
 * drag pans, hover shows an event, a click on an event highlights its step across every lane; a click on a
 * request's point (queued, first token, done) highlights the request's path: its points and every span of every
 * step that carried a row of it (the scheduler's "requests" event of each step lists them); #req=N or #step=N in
 * the URL selects one at load.
 * Big traces: a draw costs the pixels, not the events. Zoomed out, a lane's spans narrower than a pixel are merged
 * into runs where the gap between two is under a pixel too, a run drawn in the colour of the name that covers most
 * of it (one level per power of two of us per pixel, built on first use and kept); spans and
 * instants narrower than a pixel draw one mark per pixel column, and hop arrows closer than 3 px are skipped.
 * The DOM records what was drawn for tests: .lane[data-name][data-drawn][data-events][data-hl] per lane (marks
 * drawn, events they stand for, highlighted events) and #status[data-arrows][data-bubbles][data-sel-steps]
 * [data-items][data-ms] (the steps of the selected request, marks drawn over every lane, the draw's time). */
#ifndef MEMRA_TRACE_VIEWER_H
#define MEMRA_TRACE_VIEWER_H

#define VIEWER_HEAD                                                                                               \
    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>memra trace</title>\n<style>\n"                  \
    "body{margin:0;font:12px system-ui,sans-serif;background:#fafafa;color:#222}\n"                               \
    "#top{padding:6px 10px;border-bottom:1px solid #ccc;background:#fff}\n"                                       \
    "#wrap{position:relative;display:flex}\n"                                                                      \
    "#labels{width:150px;flex:none;border-right:1px solid #ccc;background:#fff}\n"                                \
    ".lane{height:30px;line-height:30px;padding-left:8px;border-bottom:1px solid #eee;white-space:nowrap;"       \
    "overflow:hidden}\n"                                                                                           \
    "#cv{flex:1;cursor:grab;display:block}\n"                                                                      \
    "#tip{position:fixed;pointer-events:none;background:#fff;border:1px solid #888;padding:4px 6px;display:none;" \
    "white-space:pre;font:11px monospace;box-shadow:2px 2px 4px #0003}\n"                                         \
    "#axis{height:20px}\n"                                                                                         \
    "</style></head><body>\n"

#define VIEWER_TAIL                                                                                               \
    "<div id=\"top\"><b>memra trace</b> <span id=\"src\"></span> &middot; wheel: zoom, drag: pan, click: follow " \
    "a step or request, double-click: reset &middot; <span id=\"status\"></span></div>\n"                          \
    "<div id=\"wrap\"><div id=\"labels\"><div class=\"lane\" id=\"axis\"></div></div><canvas id=\"cv\">"         \
    "</canvas></div><div id=\"tip\"></div>\n<script>\n"                                                            \
    "'use strict';\n"                                                                                              \
    "const LH=30,AX=20,cv=document.getElementById('cv'),cx=cv.getContext('2d'),tip=document.getElementById('tip');\n" \
    "const st=document.getElementById('status');document.getElementById('src').textContent=TRACE.src;\n"         \
    "const tracks=TRACE.tracks.slice().sort((a,b)=>a[0]-b[0]);let row={};tracks.forEach((t,i)=>row[t[0]]=i);\n"   \
    "let lanes=tracks.map(t=>({tid:t[0],name:t[1],sp:[],inst:[]}));\n"                                            \
    "let lo=Infinity,hi=-Infinity;const hops=[];const stream={};\n"                                               \
    "lanes.forEach(l=>{const m=/^stage (\\d+) stream$/.exec(l.name);if(m)stream[+m[1]]=l;});\n"                   \
    "for(const e of TRACE.ev){const l=lanes[row[e[0]]];if(!l)continue;const o={t0:e[1],t1:e[2],name:e[4],"       \
    "step:e[5],req:e[6],args:e[7],lane:l,i:e[3]};(e[3]?l.inst:l.sp).push(o);lo=Math.min(lo,e[1]);hi=Math.max(hi,e[2]);" \
    "const m=/^boundary (\\d+) hops$/.exec(l.name);if(m&&!e[3])hops.push(Object.assign(o,{b:+m[1]}));}\n"      \
    "lanes.forEach(l=>{l.sp.sort((a,b)=>a.t0-b.t0);l.inst.sort((a,b)=>a.t0-b.t0);});\n"                          \
    "const reqSteps={};for(const l of lanes)for(const o of l.inst)if(o.name==='requests'&&o.args&&o.args.reqs)"  \
    "for(const q of o.args.reqs)(reqSteps[q]||(reqSteps[q]=new Set())).add(o.step);\n"                          \
    "lanes=lanes.filter(l=>l.sp.length||l.inst.length);row={};lanes.forEach((l,i)=>row[l.tid]=i);\n"            \
    "const labels=document.getElementById('labels');\n"                                                           \
    "lanes.forEach(l=>{const d=document.createElement('div');d.className='lane';d.textContent=l.name;"           \
    "d.dataset.name=l.name;d.dataset.drawn='0';labels.appendChild(d);l.div=d;});\n"                               \
    "hops.sort((a,b)=>a.t0-b.t0);if(!(hi>lo)){lo=0;hi=1;}\n"                                                       \
    "let v0=lo,v1=hi,sel=null;\n"                                                                                  \
    "const col={walk:'#3b7dd8',enqueue:'#7fb069',readback:'#e09f3e','mailbox wait':'#ddd',hop:'#9b59b6'};\n"      \
    "function X(t){return (t-v0)/(v1-v0)*cv.width;}\n"                                                             \
    "function T(x){return v0+x/cv.width*(v1-v0);}\n"                                                               \
    "function hit(o){return sel&&((sel.step>=0&&o.step===sel.step)||(sel.req>=0&&(o.req===sel.req||"           \
    "(o.step>=0&&sel.steps.has(o.step)))));}\n"                                                                    \
    "function pick(o){return o.req>=0?{step:-1,req:o.req,steps:reqSteps[o.req]||new Set()}:{step:o.step,req:-1};}\n" \
    "{const h=/^#(req|step)=(\\d+)$/.exec(location.hash);if(h)sel=h[1]==='req'?pick({req:+h[2]}):{step:+h[2],req:-1};}\n"         \
    "function first(a,t){let l=0,h=a.length;while(l<h){const m=(l+h)>>1;if(a[m].t1<t)l=m+1;else h=m;}return l;}\n" \
    "function firstT0(a,t){let l=0,h=a.length;while(l<h){const m=(l+h)>>1;if(a[m].t0<t)l=m+1;else h=m;}return l;}\n"   \
    "function lod(l,g){if(!(g>0))return l.sp;const q=Math.ceil(Math.log2(g));l.lod=l.lod||{};if(l.lod[q])return l.lod[q];\n" \
    "const w=Math.pow(2,q),out=[];let c=null;\n"                                                                       \
    "for(const o of l.sp){const d=o.t1-o.t0;if(d>=w){c=null;out.push({n:1,o:o});continue;}\n"                  \
    "if(c&&o.t0-c.t1<w){if(o.t1>c.t1)c.t1=o.t1;c.n++;c.by[o.name]=(c.by[o.name]||0)+d;}\n"                        \
    "else{c={t0:o.t0,t1:o.t1,n:1,o:o,by:{[o.name]:d}};out.push(c);}}\n"                                            \
    "const top=b=>Object.keys(b).reduce((x,y)=>b[x]>=b[y]?x:y);\n" \
    "const m=out.map(c=>c.n===1?c.o:{t0:c.t0,t1:c.t1,name:top(c.by),n:c.n,step:-1,req:-1,args:{merged:c.n},lane:l});\n"   \
    "return l.lod[q]=m.length*2<l.sp.length?m:l.sp;}\n"                                                                \
    "function select(s){sel=s;lanes.forEach(l=>{l.hits=sel?l.sp.filter(hit).concat(l.inst.filter(hit)):[];});}\n"      \
    "function draw(){const tb=performance.now(),W=cv.clientWidth;cv.width=W;cv.height=AX+lanes.length*LH;\n"           \
    "cx.clearRect(0,0,cv.width,cv.height);cx.fillStyle='#666';cx.font='10px sans-serif';\n"                            \
    "for(let i=0;i<=10;i++){const x=i*W/10;cx.fillRect(x,0,1,AX);cx.fillText((T(x)-lo).toFixed(1)+' us',x+2,12);}\n"   \
    "let bubbles=0,arrows=0,items=0;const g=(v1-v0)/Math.max(W,1);\n"                                                  \
    "lanes.forEach((l,i)=>{const y=AX+i*LH;cx.fillStyle=i%2?'#f4f4f4':'#fff';cx.fillRect(0,y,W,LH);let drawn=0,ev=0,hl=0;\n" \
    "const isStream=/stream$/.test(l.name),isK=/kernels$/.test(l.name);let prevEnd=null;const px=new Uint8Array(W+1),sp=lod(l,g);\n" \
    "for(let k=first(sp,v0);k<sp.length;k++){const o=sp[k];if(o.t0>v1)break;ev+=o.n||1;const x0=X(o.t0),x1=X(o.t1);\n" \
    "if(isStream&&o.name==='walk'){if(prevEnd!==null&&o.t0>prevEnd){const bx=X(prevEnd);cx.fillStyle='#f3c0c0';\n"     \
    "cx.fillRect(bx,y+2,x0-bx,LH-4);bubbles++;}prevEnd=prevEnd===null?o.t1:Math.max(prevEnd,o.t1);}\n"                 \
    "const fc=isK?'#16a085':col[o.name]||'#888';\n"                                                                    \
    "if(x1-x0<1){const c=Math.max(0,Math.min(W,x0|0));if(!px[c]){px[c]=1;cx.fillStyle=fc;cx.fillRect(c,y+4,1,LH-8);drawn++;}}\n" \
    "else{cx.fillStyle=fc;cx.fillRect(x0,y+4,Math.max(1,x1-x0-1),LH-8);drawn++;\n"                                     \
    "if(x1-x0>40&&!o.n){cx.fillStyle='#fff';cx.fillText(o.name+(o.step>=0?' '+o.step:''),x0+3,y+18);}}}\n"             \
    "const pi=new Uint8Array(W+1);cx.fillStyle='#c33';\n"                                                              \
    "for(let k=firstT0(l.inst,v0);k<l.inst.length;k++){const o=l.inst[k];if(o.t0>v1)break;ev++;const x=X(o.t0),c=Math.max(0,Math.min(W,x|0));\n" \
    "if(pi[c])continue;pi[c]=1;cx.beginPath();cx.moveTo(x,y+4);cx.lineTo(x-4,y+14);cx.lineTo(x+4,y+14);cx.fill();drawn++;}\n" \
    "const ph=new Uint8Array(W+1);for(const o of l.hits||[]){if(o.t1<v0||o.t0>v1)continue;hl++;const x0=X(o.t0),x1=X(o.t1),\n"     \
    "c=Math.max(0,Math.min(W,x0|0));if(x1-x0<1&&ph[c])continue;ph[c]=1;\n"                      \
    "if(o.i){cx.fillStyle='#d00';cx.beginPath();cx.moveTo(x0,y+4);cx.lineTo(x0-4,y+14);cx.lineTo(x0+4,y+14);cx.fill();}\n" \
    "else{cx.strokeStyle='#d00';cx.lineWidth=2;cx.strokeRect(x0,y+3,Math.max(x1-x0,2),LH-6);}}\n"                      \
    "items+=drawn;l.div.dataset.drawn=String(drawn);l.div.dataset.events=String(ev);l.div.dataset.hl=String(hl);});\n" \
    "let lastX=-9;cx.lineWidth=1;for(let k=first(hops,v0);k<hops.length;k++){const h=hops[k];if(h.t0>v1)break;const a=stream[h.b],"         \
    "b=stream[h.b+1];if(!a||!b)continue;const x0=X(h.t0),x1=X(h.t1);if(!hit(h)&&x0-lastX<3)continue;lastX=x0;"   \
    "const y0=AX+row[a.tid]*LH+LH-4,y1=AX+row[b.tid]*LH+4;cx.strokeStyle=hit(h)?'#d00':'#9b59b6';"              \
    "cx.beginPath();cx.moveTo(x0,y0);cx.lineTo(x1,y1);cx.stroke();const an=Math.atan2(y1-y0,x1-x0);"             \
    "cx.beginPath();cx.moveTo(x1,y1);cx.lineTo(x1-6*Math.cos(an-0.4),y1-6*Math.sin(an-0.4));"                   \
    "cx.lineTo(x1-6*Math.cos(an+0.4),y1-6*Math.sin(an+0.4));cx.fillStyle=cx.strokeStyle;cx.fill();arrows++;}\n"  \
    "st.dataset.arrows=String(arrows);st.dataset.bubbles=String(bubbles);"                                        \
    "st.dataset.selSteps=sel&&sel.steps?String(sel.steps.size):'0';st.dataset.items=String(items);"     \
    "st.dataset.ms=(performance.now()-tb).toFixed(1);"                                        \
    "st.textContent=lanes.length+' lanes, '+arrows+' hop arrows, '+bubbles+' bubbles shown'+"                     \
    "(sel?', following '+(sel.step>=0?'step '+sel.step:'request '+sel.req+' ('+sel.steps.size+' steps)'):'');}\n"                              \
    "function at(ev){const r=cv.getBoundingClientRect(),x=ev.clientX-r.left,y=ev.clientY-r.top;"                \
    "const l=lanes[Math.floor((y-AX)/LH)];if(!l)return null;const t=T(x),eps=(v1-v0)/cv.width*3;"               \
    "for(const o of l.inst)if(Math.abs(o.t0-t)<eps)return o;const k=first(l.sp,t-eps);"                           \
    "for(let j=k;j<l.sp.length&&l.sp[j].t0<=t+eps;j++)if(l.sp[j].t1>=t-eps)return l.sp[j];return null;}\n"      \
    "let drag=null;cv.addEventListener('mousedown',e=>{drag={x:e.clientX,v0,v1,moved:false};});\n"              \
    "window.addEventListener('mouseup',e=>{if(drag&&!drag.moved){const o=at(e);select(o?pick(o):null);" \
    "draw();}drag=null;});\n"                                                                                      \
    "cv.addEventListener('mousemove',e=>{if(drag){const dx=e.clientX-drag.x;if(Math.abs(dx)>2)drag.moved=true;"  \
    "const d=dx/cv.width*(drag.v1-drag.v0);v0=drag.v0-d;v1=drag.v1-d;draw();return;}const o=at(e);"            \
    "if(!o){tip.style.display='none';return;}tip.style.display='block';tip.style.left=(e.clientX+12)+'px';"      \
    "tip.style.top=(e.clientY+12)+'px';tip.textContent=(o.n?o.n+' spans merged (zoom in): ':'')+o.name+' on '+o.lane.name+'\\n'+"                         \
    "(o.t1>o.t0?'duration '+(o.t1-o.t0).toFixed(1)+' us\\n':'')+'at +'+(o.t0-lo).toFixed(1)+' us\\n'+"          \
    "JSON.stringify(o.args);});\n"                                                                                 \
    "cv.addEventListener('mouseleave',()=>{tip.style.display='none';});\n"                                        \
    "cv.addEventListener('wheel',e=>{e.preventDefault();const r=cv.getBoundingClientRect(),t=T(e.clientX-r.left);" \
    "const f=e.deltaY>0?1.25:0.8;v0=t-(t-v0)*f;v1=t+(v1-t)*f;draw();},{passive:false});\n"                       \
    "cv.addEventListener('dblclick',()=>{v0=lo;v1=hi;select(null);draw();});\n"                                       \
    "select(sel);window.addEventListener('resize',draw);draw();\n"                                                            \
    "</script></body></html>\n"

#endif
