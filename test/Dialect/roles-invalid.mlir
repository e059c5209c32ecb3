// The verifiers of value roles: #ds.state's fields, and where #ds.role
// may stand.
// RUN: dsopt-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{a state needs the name of its parameter}}
func.func @no_param(%a: tensor<4xf32> {ds.state = #ds.state<accumulator, param = "">}) {
  return
}

// -----

// expected-error @+1 {{a gradient accumulator has no optimizer role (got 'exp_avg')}}
func.func @accumulator_role(%a: tensor<4xf32> {ds.state = #ds.state<accumulator, role = "exp_avg", param = "w">}) {
  return
}

// -----

// expected-error @+1 {{an optimizer state needs its role (the optimizer's name of the state)}}
func.func @optimizer_no_role(%a: tensor<4xf32> {ds.state = #ds.state<optimizer, param = "w">}) {
  return
}

// -----

// expected-error @+2 {{expected ::dsopt::ds::StateKind to be one of: accumulator, optimizer}}
// expected-error @+1 {{failed to parse Ds_StateAttr parameter 'kind'}}
func.func @unknown_kind(%a: tensor<4xf32> {ds.state = #ds.state<moment, param = "w">}) {
  return
}

// -----

// expected-error @+1 {{'ds.role' must be a #ds.role attribute}}
func.func @role_string(%a: tensor<4xf32> {ds.input = "v0_0", ds.role = "recv"}) {
  return
}

// -----

// expected-error @+1 {{argument 0 cannot have role 'send' (a stage function receives or keeps its arguments)}}
func.func @send_argument(%a: tensor<4xf32> {ds.input = "v0_0", ds.role = #ds.role<send>}) {
  return
}

// -----

// expected-error @+1 {{argument 0 with 'ds.role' needs 'ds.input' (the value's id)}}
func.func @role_without_id(%a: tensor<4xf32> {ds.role = #ds.role<recv>}) {
  return
}

// -----

// expected-error @+1 {{result 0 cannot have role 'recv' (a stage function sends or keeps its results)}}
func.func @recv_result(%a: tensor<4xf32>) -> (tensor<4xf32> {ds.output = "v0_0", ds.role = #ds.role<recv>}) {
  return %a : tensor<4xf32>
}

// -----

// expected-error @+1 {{result 0 with 'ds.role' needs 'ds.output' (the value's id)}}
func.func @result_role_without_id(%a: tensor<4xf32>) -> (tensor<4xf32> {ds.role = #ds.role<send>}) {
  return %a : tensor<4xf32>
}
